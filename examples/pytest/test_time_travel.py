"""Time travel with ctxledger's pytest fixtures and freezegun (docs/pytest-plugin.md's example)."""

from datetime import UTC, datetime, timedelta

from freezegun import freeze_time

T0 = datetime(2025, 5, 1, 9, 0, tzinfo=UTC)


def test_example_dialogue_expires_as_the_chat_moves_on(
        ctxledger_ledger, ctxledger_events, ctxledger_assert_decisions):
    ev = ctxledger_events
    with freeze_time(T0) as clock:
        ctxledger_ledger.append("rp-1", [
            ev.session_started(scope="alice"),
            ev.card_set(name="Mara", description="Keeps the Gull Point light.",
                        mes_example="{{char}}: The lamp comes first."),
            ev.setting("compression_level", "chat_dialogue"),
        ])
        for turn in range(1, 7):
            clock.tick(timedelta(minutes=2))
            ctxledger_ledger.append("rp-1", ev.message(f"turn {turn}"))
            assembly = ctxledger_ledger.assemble("rp-1", "card")  # now: the frozen clock
            expected = "included" if turn < 5 else ("expired", "expired_by_level_and_count")
            ctxledger_assert_decisions(assembly, {"description": "included",
                                                  "mes_example": expected})
    assert assembly.now == T0 + timedelta(minutes=12)
    assert ctxledger_ledger.events("rp-1")[-1].recorded_at == assembly.now


def test_a_tool_score_decays_over_seven_days_then_leaves_the_window(
        ctxledger_ledger, ctxledger_events):
    ev = ctxledger_events
    with freeze_time(T0) as clock:
        ctxledger_ledger.append("scope:acme", ev.tool_registered(name="lint", tool_type="skill"))
        ctxledger_ledger.append("s-1", [ev.session_started(scope="acme"),
                                        ev.tool_used(tool_name="lint")])

        def score():
            (lint,) = ctxledger_ledger.assemble("s-1", "session").report.tools
            return lint.score

        fresh = score()
        clock.move_to(T0 + timedelta(days=7))
        week_old = score()
        clock.move_to(T0 + timedelta(days=8))
        expired = score()
        clock.move_to(T0 + timedelta(days=1))  # backwards works too
        day_old = score()
    assert fresh == 1.0
    assert round(week_old, 2) == 0.85  # 0.7 + 0.3 * exp(-0.693)
    assert expired == 0.0  # not used in the 7-day window
    assert week_old < day_old < fresh
