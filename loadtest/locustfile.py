"""The locustfile ``fyrehose loadtest`` runs: ``python -m locust -f <this file> --fyrehose-... ``.

It declares the ``--fyrehose-*`` options, offers the two user classes and the
shape class to Locust, and wires Locust's events to the run's coordination
(see coordination.py).  Locust imports it as a top-level module, so it only
wires; the logic lives in the package.
"""
from __future__ import annotations

import time

import gevent
import locust.stats
from locust import LoadTestShape, events
from locust.runners import MasterRunner, WorkerRunner

from fyrehose.loadtest.coordination import (
    FINISH,
    LEAD_IN,
    LOCAL_NODE,
    TALLY,
    TALLY_INTERVAL,
    TRUNCATE,
    Conductor,
    ProcessRun,
)
from fyrehose.loadtest.settings import PREFIX, LoadSettings, add_setting_arguments
from fyrehose.loadtest.tally import bucket_ms
from fyrehose.loadtest.users import Publisher, Subscriber

# Locust rounds response times below 100 ms to whole milliseconds; a loopback round trip takes a fraction of one.
# Locust documents replacing this function, but annotates it as returning an int; these finer buckets are floats.
locust.stats.bucket_response_time = bucket_ms  # type: ignore[assignment]

__all__ = ["Publisher", "Subscriber", "ScheduledLoad"]


class ScheduledLoad(LoadTestShape):
    """All users for as long as the conductor wants the run to go on (the offered rate is paced inside the users)."""

    conductor: Conductor  # set when Locust initialises the master (or the single local process)

    def tick(self) -> tuple[int, float] | None:
        if not self.conductor.handle_timers(time.time()):
            return None
        settings = self.conductor.settings
        users = settings.users + settings.subscribers
        return users, users  # all at once


@events.init_command_line_parser.add_listener
def _declare_options(parser, **_kwargs) -> None:
    add_setting_arguments(parser, prefix=PREFIX, include_in_web_ui=False)


def _settings(environment) -> LoadSettings:
    return LoadSettings.from_namespace(environment.parsed_options, PREFIX.replace("-", "_"))


@events.init.add_listener
def _on_init(environment, runner, **_kwargs) -> None:
    settings = _settings(environment)
    settings.validate()
    Subscriber.fixed_count = settings.subscribers
    if not isinstance(runner, WorkerRunner):
        conductor = Conductor(
            settings,
            broadcast=lambda kind, data: runner.send_message(kind, data),
            expected_nodes=lambda: set(runner.clients.keys()) if isinstance(runner, MasterRunner) else {LOCAL_NODE},
        )
        environment.shape_class.conductor = conductor
        runner.register_message(TALLY, lambda environment, msg, **_: conductor.receive(msg.node_id, msg.data))
    if not isinstance(runner, MasterRunner):
        runner.register_message(TRUNCATE, lambda environment, msg, **_: Publisher.load.truncate(msg.data["at"]))
        runner.register_message(FINISH, lambda environment, msg, **_: _finish(runner))


def _finish(runner) -> None:
    run = Publisher.load
    run.finish()
    runner.send_message(TALLY, run.tally_message(final=True))


def _send_tallies(runner, run: ProcessRun) -> None:
    while True:
        gevent.sleep(TALLY_INTERVAL)
        runner.send_message(TALLY, run.tally_message(final=False))


_sender: list[gevent.Greenlet] = []


@events.test_start.add_listener
def _on_test_start(environment, **_kwargs) -> None:
    runner = environment.runner
    options = environment.parsed_options
    if isinstance(runner, WorkerRunner):
        anchor = options.fyrehose_anchor  # the master's, from the spawn message
    else:
        anchor = time.time() + LEAD_IN
        # Locust sends the master's options to the workers with each spawn message, after this event:
        # so every process counts the phases from the same instant.
        options.fyrehose_anchor = anchor
        environment.shape_class.conductor.start(anchor)
    if not isinstance(runner, MasterRunner):
        run = ProcessRun(_settings(environment), anchor)
        Publisher.load = Subscriber.load = run
        _sender.append(gevent.spawn(_send_tallies, runner, run))


@events.test_stop.add_listener
def _on_test_stop(environment, **_kwargs) -> None:
    while _sender:
        _sender.pop().kill()
    if not isinstance(environment.runner, WorkerRunner):
        conductor = environment.shape_class.conductor
        if not conductor.written:  # stopped from the web UI before the run was over
            conductor.write(complete=False)
