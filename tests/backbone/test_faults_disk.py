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
import subprocess
import time
from pathlib import Path

import pytest

from fyrehose import Client
from fyrehose.journal.verify import verify_directory

from support import EVENT_WITHIN, JournalProcess, run_cli, wait_until


def mount_tmpfs(directory: Path, size: str) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True,
                   capture_output=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs to fill needs root")
def test_full_disk_stops_the_journal_loudly_and_a_restart_loses_and_repeats_nothing(backbone_factory, tmp_path):
    backbone = backbone_factory(workers=0)
    disk = tmp_path / "disk"
    disk.mkdir()
    mount_tmpfs(disk, "2m")
    journal_dir = disk / "journal"
    log = tmp_path / "journal.log"  # off the small disk, so the journal's last words are kept
    journal = JournalProcess(backbone.address, journal_dir, "--no-parquet", "--fsync", "always",
                             "--segment-size", "256KiB", "--give-up", "5", log=log)
    try:
        with Client(backbone.addr) as keeper, Client(backbone.addr, subscribe=False) as pub:
            keeper.subscribe()  # holds every message in memory: what the restarted journal backfills from
            journal.start()
            wait_until(lambda: "starting at the live stream" in log.read_text(errors="replace"), EVENT_WITHIN,
                       f"the journal's start in {log}")
            first = pub.publish(b"first")
            payload = b"d" * 1000
            last = first
            for _ in range(60):  # up to 6 MB, three times the disk
                last = pub.publish_many([payload] * 100)[-1]
                if not journal.alive():
                    break
            assert journal.child.proc.wait(30) != 0, "the journal kept running on a full disk"
            text = log.read_text(errors="replace")
            assert "No space left on device" in text, text[-2000:]

            subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True, capture_output=True)
            journal.start()
            wait_until(lambda: "resuming at sequence" in log.read_text(errors="replace"), EVENT_WITHIN,
                       f"the restarted journal's resumption in {log}")
            last = pub.publish_many([b"after space returned %d" % i for i in range(100)])[-1]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                report = verify_directory(journal_dir)
                if report.last_seq is not None and report.last_seq >= last:
                    break
                time.sleep(0.5)
            assert journal.stop() == 0, log.read_text()[-2000:]
        report = verify_directory(journal_dir)
        assert report.ok, report.lines()
        assert report.first_seq == first and report.last_seq == last
        assert report.records + report.lost == last - first + 1  # each sequence held once, or recorded lost
        assert report.lost == 0  # the keeper held everything the journal missed
        assert run_cli("journal", "verify", str(journal_dir)).returncode == 0
    finally:
        journal.kill()
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
