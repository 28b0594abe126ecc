"""A full disk under the journal (a 2 MiB tmpfs the test mounts; root only).

Expected outcome: when the disk fills, the journal stops with a clear one-line
error and a non-zero exit, instead of running on without writing; what it had
written stays readable.  Once space is back, the restarted journal cuts any
torn tail, resumes after its last durable record, backfills everything it
missed from another client, and ends with every sequence from its first to
the last published held exactly once in order, or recorded in gaps.jsonl;
``fyrehose journal verify`` passes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fyrehose import Client
from fyrehose.journal.verify import verify_directory

from support import FYREHOSE, run_cli


def mount_tmpfs(directory: Path, size: str) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True,
                   capture_output=True)


def start_journal(backbone, directory: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(FYREHOSE + ["journal", "--backbone", backbone.address, "--dir", str(directory),
                                            "--no-parquet", "--fsync", "always", "--segment-size", "256KiB",
                                            "--give-up", "5"], stdout=out, stderr=subprocess.STDOUT)


def wait_for_text(log: Path, text: str, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs to fill needs root")
def test_full_disk_stops_the_journal_loudly_and_a_restart_loses_and_repeats_nothing(backbone_factory, tmp_path):
    backbone = backbone_factory(workers=0)
    disk = tmp_path / "disk"
    disk.mkdir()
    mount_tmpfs(disk, "2m")
    journal_dir = disk / "journal"
    log = tmp_path / "journal.log"
    procs: list[subprocess.Popen] = []
    try:
        with Client(backbone.addr) as keeper, Client(backbone.addr, subscribe=False) as pub:
            keeper.subscribe()  # holds every message in memory: what the restarted journal backfills from
            procs.append(start_journal(backbone, journal_dir, log))
            assert wait_for_text(log, "starting at the live stream"), log.read_text()
            first = pub.publish(b"first")
            payload = b"d" * 1000
            last = first
            for _ in range(60):  # up to 6 MB, three times the disk
                last = pub.publish_many([payload] * 100)[-1]
                if procs[0].poll() is not None:
                    break
            assert procs[0].wait(30) != 0, "the journal kept running on a full disk"
            text = log.read_text(errors="replace")
            assert "No space left on device" in text, text[-2000:]

            subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True, capture_output=True)
            procs.append(start_journal(backbone, journal_dir, log))
            assert wait_for_text(log, "resuming at sequence"), log.read_text()[-2000:]
            last = pub.publish_many([b"after space returned %d" % i for i in range(100)])[-1]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                report = verify_directory(journal_dir)
                if report.last_seq is not None and report.last_seq >= last:
                    break
                time.sleep(0.5)
            os.kill(procs[1].pid, signal.SIGTERM)
            assert procs[1].wait(30) == 0, log.read_text()[-2000:]
        report = verify_directory(journal_dir)
        assert report.ok, report.lines()
        assert report.first_seq == first and report.last_seq == last
        assert report.records + report.lost == last - first + 1  # each sequence held once, or recorded lost
        assert report.lost == 0  # the keeper held everything the journal missed
        assert run_cli("journal", "verify", str(journal_dir)).returncode == 0
    finally:
        for proc in procs:
            stop(proc)
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
