"""From tallies to results: each phase's rates, losses and percentiles, whether it was sustained, the summary.

Pure.  Each phase has the rate *asked* for (the schedule's, ``--rate``) and
the rate the publishers *sent* (their publish attempts, confirmed or not, in
messages per second).  A phase is *sustained* when subscribers received at
least RATE_TOLERANCE of the asked rate, less than LOSS_LIMIT of the messages
missed the backbone's own delivery (loss before recovery), less than
LOSS_LIMIT of the publishes failed, and the publish-to-confirm p99 stayed
under the threshold.  The capacity is the highest asked rate of a sustained
phase; for the step shape only the steps before the first unsustained one
count, since a rate is not sustained when a lower one was not.

When the publishers sent less than GENERATOR_SHORTFALL of the asked rate, the
phase did not test the backbone at that rate: the *load generator fell
short* (its users, one request in flight each, could not send faster).  Such
a phase is not sustained, the reason says it was the generator, and the
backbone is judged on what was sent instead (delivered at least
RATE_TOLERANCE of it, the same loss, failure and latency limits): the summary
then names the generator, not a sustained rate of 0, as what limited the run.
"""
from __future__ import annotations

from dataclasses import dataclass

from fyrehose.loadtest.rates import Phase, RateSchedule
from fyrehose.loadtest.saturation import PhaseLoad, describe, percent
from fyrehose.loadtest.tally import PhaseTally, RunTally

LOSS_LIMIT = 0.001  # < 0.1 %
RATE_TOLERANCE = 0.95
GENERATOR_SHORTFALL = 0.9  # sent below this share of the asked rate: the load generator fell short
GENERATOR_FELL_SHORT = "generator fell short"  # how the reason of such a phase begins
CUT_SHORT = "cut short"


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


@dataclass
class PhaseResult:
    name: str
    t_start: float  # unix seconds
    t_end: float
    offered_rate: float  # msgs/s asked for, all publishers together (the schedule's rate; its old name, kept)
    asked_rate: float  # the same: msgs/s asked for
    sent_rate: float  # msgs/s the publishers sent: publish attempts (confirmed or not) counted by the users
    delivered_rate: float  # msgs/s each subscriber received (directly or recovered), averaged over subscribers
    confirmed_rate: float  # msgs/s the backbone CONFIRMed
    loss_before_recovery: float  # fraction of expected messages the backbone's DELIVERs missed
    loss_after_recovery: float  # fraction given up (or, mid-run, still missing)
    p50_ms: float | None  # publish-to-confirm
    p99_ms: float | None
    deliver_p50_ms: float | None  # publish-to-deliver
    deliver_p99_ms: float | None
    requests: int
    failures: int
    expected: int
    missed_before_recovery: int
    lost_after_recovery: int
    sustained: bool
    reasons: list[str]
    generator_fell_short: bool = False  # sent < GENERATOR_SHORTFALL of the asked rate


def generator_fell_short(asked: float, sent: float) -> bool:
    return sent < GENERATOR_SHORTFALL * asked


def backbone_reasons(reasons: list[str]) -> list[str]:
    """The reasons of a phase that are the backbone's (not the generator falling short, not the cut)."""
    return [reason for reason in reasons if not reason.startswith((GENERATOR_FELL_SHORT, CUT_SHORT))]


def judge(phase: Phase, tally: PhaseTally, anchor: float, p99_limit_ms: float, final: bool) -> PhaseResult:
    """The result of one phase; mid-run (``final`` False) still-missing messages count as lost after recovery too."""
    seconds = phase.duration
    expected = tally.expected
    missed = tally.recovered + tally.lost + tally.pending
    unrecovered = tally.lost + (0 if final else tally.pending)
    delivered = (tally.direct + tally.recovered) / tally.receivers / seconds if tally.receivers else 0.0
    sent = tally.messages / seconds
    # a phase cut short stopped publishing before its end: what it sent says nothing of the generator
    short = not phase.cut_short and generator_fell_short(phase.rate, sent)
    p99 = tally.push_ms.percentile(0.99)
    result = PhaseResult(
        name=phase.name,
        t_start=anchor + phase.start,
        t_end=anchor + phase.end,
        offered_rate=phase.rate,
        asked_rate=phase.rate,
        sent_rate=sent,
        delivered_rate=delivered,
        confirmed_rate=(tally.messages - tally.message_failures) / seconds,
        loss_before_recovery=_ratio(missed, expected),
        loss_after_recovery=_ratio(unrecovered, expected),
        p50_ms=tally.push_ms.percentile(0.5),
        p99_ms=p99,
        deliver_p50_ms=tally.deliver_ms.percentile(0.5),
        deliver_p99_ms=tally.deliver_ms.percentile(0.99),
        requests=tally.pushes,
        failures=tally.push_failures,
        expected=expected,
        missed_before_recovery=missed,
        lost_after_recovery=unrecovered,
        sustained=False,
        reasons=[],
        generator_fell_short=short,
    )
    reasons = result.reasons
    if phase.cut_short:
        reasons.append(f"{CUT_SHORT}: publishing stopped during this phase")
    if short:
        reasons.append(f"{GENERATOR_FELL_SHORT}: sent {sent:.0f}/s of the {phase.rate:.0f}/s asked "
                       f"(< {GENERATOR_SHORTFALL:.0%})")
    if not expected:
        reasons.append("no message reached a subscriber")
    elif short:  # the backbone can only deliver what was sent
        if delivered < RATE_TOLERANCE * sent:
            reasons.append(f"delivered {delivered:.0f}/s < {RATE_TOLERANCE:.0%} of the {sent:.0f}/s sent")
    elif delivered < RATE_TOLERANCE * phase.rate:
        reasons.append(f"delivered {delivered:.0f}/s < {RATE_TOLERANCE:.0%} of asked {phase.rate:.0f}/s "
                       f"(sent {sent:.0f}/s)")
    if result.loss_before_recovery >= LOSS_LIMIT:
        reasons.append(f"loss before recovery {result.loss_before_recovery:.2%} >= {LOSS_LIMIT:.1%}")
    if _ratio(tally.push_failures, tally.pushes) >= LOSS_LIMIT:
        reasons.append(f"{tally.push_failures} of {tally.pushes} publishes unconfirmed")
    if p99 is None or p99 >= p99_limit_ms:
        reasons.append("no publish confirmed" if p99 is None else f"p99 {p99:g} ms >= {p99_limit_ms:g} ms")
    result.sustained = not reasons
    return result


def judge_all(schedule: RateSchedule, tally: RunTally, anchor: float, p99_limit_ms: float,
              final: bool) -> list[PhaseResult]:
    return [judge(phase, tally[index], anchor, p99_limit_ms, final) for index, phase in enumerate(schedule.phases)]


def summarize(results: list[PhaseResult], tally: RunTally, run: dict, complete: bool) -> dict:
    """The run's summary.json: ``run`` describes the set-up (shape, users, backbone, ...)."""
    total = tally.total()
    expected = total.expected
    missed = total.recovered + total.lost + total.pending
    broken_at = next((index for index, result in enumerate(results) if not result.sustained), len(results))
    counted = results[:broken_at] if run.get("shape") == "step" else results
    sustained = [result.offered_rate for result in counted if result.sustained]
    broken = results[broken_at] if broken_at < len(results) else None
    # for step, the search ended at the first unsustained step: only that one can show the generator falling short
    judged = (counted + [broken] if broken is not None else counted) if run.get("shape") == "step" else results
    return {
        **run,
        "complete": complete,
        "max_sustained_rate": max(sustained, default=0.0),
        "max_sent_rate": max((result.sent_rate for result in results), default=0.0),
        "generator_shortfall": _shortfall([result for result in judged if result.generator_fell_short]),
        "first_unsustained_phase": None if broken is None else {"name": broken.name, "reasons": broken.reasons},
        "loss_before_recovery": _ratio(missed, expected),
        "loss_after_recovery": _ratio(total.lost + total.pending, expected),
        "messages_expected": expected,
        "messages_missed_before_recovery": missed,
        "messages_lost_after_recovery": total.lost + total.pending,
        "p50_ms": total.push_ms.percentile(0.5),
        "p99_ms": total.push_ms.percentile(0.99),
        "deliver_p50_ms": total.deliver_ms.percentile(0.5),
        "deliver_p99_ms": total.deliver_ms.percentile(0.99),
        "requests": total.pushes,
        "failures": total.push_failures,
        "messages": total.messages,
        "message_failures": total.message_failures,
        "phases": len(results),
    }


def _shortfall(short: list[PhaseResult]) -> dict | None:
    """Of the phases where the load generator fell short, the one that sent the most (the generator's best):
    what it was asked and sent, what was delivered, and whether the backbone kept up with what was sent."""
    if not short:
        return None
    best = max(short, key=lambda result: result.sent_rate)
    reasons = backbone_reasons(best.reasons)
    return {"phase": best.name, "asked_rate": best.asked_rate, "sent_rate": best.sent_rate,
            "delivered_rate": best.delivered_rate, "backbone_kept_up": not reasons, "backbone_reasons": reasons}


def describe_shortfall(shortfall: dict) -> str:
    """The verdict on a run whose load generator could not send what was asked, for the terminal."""
    sent, asked = shortfall["sent_rate"], shortfall["asked_rate"]
    line = (f"the load generator sent at most {sent:.0f} msgs/s of the {asked:.0f} asked "
            f"({_ratio_text(sent, asked)}, in {shortfall['phase']}); ")
    if shortfall["backbone_kept_up"]:
        return line + (f"the backbone delivered all of it ({shortfall['delivered_rate']:.0f} msgs/s per subscriber): "
                       f"raise --users or --batch, or use more --workers")
    return line + "and the backbone did not keep up even with that: " + "; ".join(shortfall["backbone_reasons"])


def _ratio_text(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(summary: dict, steps: list[dict]) -> str:
    """The capacity summary for the terminal: one row per phase, then the verdict."""
    batches = f" publishing batches of {summary['batch']}" if summary.get("batch") else ""
    lines = [
        f"fyrehose loadtest: {summary['shape']} shape, {summary['users']} publishers{batches}, "
        f"{summary['subscribers']} subscribers, backbone {summary['backbone']}",
        f"{'phase':<16} {'asked/s':>10} {'sent/s':>10} {'delivered/s':>12} {'loss before':>12} {'loss after':>11} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'cpu bb':>7} {'cpu gen':>7} {'cpu host':>8} {'us bb':>6} {'us gen':>6}  sustained",
    ]
    for step in steps:
        load = step.get("load") or {}
        lines.append(
            f"{step['name']:<16} {step['offered_rate']:>10.0f} {_rate(step.get('sent_rate')):>10} "
            f"{step['delivered_rate']:>12.1f} "
            f"{step['loss_before_recovery']:>12.3%} {step['loss_after_recovery']:>11.3%} "
            f"{_ms(step['p50_ms']):>8} {_ms(step['p99_ms']):>8} "
            f"{percent(load.get('backbone_busiest')):>7} {percent(load.get('generator_busiest')):>7} "
            f"{percent(load.get('host_busy')):>8} {_us(load.get('backbone_us_per_message')):>6} "
            f"{_us(load.get('generator_us_per_message')):>6}  "
            + ("yes" if step["sustained"] else "no: " + "; ".join(step["reasons"]))
        )
    shortfall = summary.get("generator_shortfall")
    if shortfall and not summary["max_sustained_rate"]:
        lines.append(f"max sustained rate: not measured: {describe_shortfall(shortfall)}")
    else:
        lines.append(
            f"max sustained rate: {summary['max_sustained_rate']:.0f} msgs/s "
            f"(loss before recovery < {LOSS_LIMIT:.1%}, publish-to-confirm p99 < {summary['p99_threshold_ms']:g} ms)"
        )
        if shortfall:
            lines.append(f"generator fell short: {describe_shortfall(shortfall)}")
    broken, limit = summary.get("first_unsustained_phase"), summary.get("limit")
    if broken and limit:
        lines.append(f"at {broken['name']}, {describe(PhaseLoad(**limit))}")
    lines.append(
        f"publishes: {summary['requests']} requests ({summary['failures']} failed) carrying "
        f"{summary.get('messages', summary['requests'])} messages, p50 {_ms(summary['p50_ms'])} ms, "
        f"p99 {_ms(summary['p99_ms'])} ms; publish-to-deliver p50 {_ms(summary['deliver_p50_ms'])} ms, "
        f"p99 {_ms(summary['deliver_p99_ms'])} ms"
    )
    lines.append(
        f"loss: {summary['messages_missed_before_recovery']} of {summary['messages_expected']} deliveries "
        f"missed before recovery ({summary['loss_before_recovery']:.3%}), "
        f"{summary['messages_lost_after_recovery']} after ({summary['loss_after_recovery']:.3%})"
    )
    if not summary["complete"]:
        lines.append("incomplete: the run was stopped early or a worker's final tally is missing")
    return "\n".join(lines)
