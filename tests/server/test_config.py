"""``suffice serve``'s settings: a bad value is refused before the engine starts,
as a :class:`~suffice.exceptions.ConfigError` naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from suffice.cli.main import build_parser
from suffice.exceptions import EXIT_USAGE, ConfigError
from suffice.server.config import ServeConfig


@pytest.mark.parametrize("seconds", [float("inf"), float("-inf"), float("nan"), 0.0])
def test_a_request_timeout_that_is_not_a_positive_finite_number_is_refused_naming_it(seconds: float) -> None:
    with pytest.raises(ConfigError) as caught:
        ServeConfig(request_timeout=seconds)
    assert caught.value.parameter == "request_timeout"


def test_serve_with_an_infinite_request_timeout_is_a_usage_error_before_the_engine_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was accepted, the engine loaded (minutes on a GPU), and then the drain limit
    ``int(inf)`` raised OverflowError: a traceback instead of a usage error."""
    import suffice.server.service as service

    def no_engine(config: object) -> None:
        raise AssertionError("the engine was started")

    monkeypatch.setattr(service, "make_engine", no_engine)
    args = build_parser().parse_args(["serve", "--port", "0", "--gate", "sufficiency", "--request-timeout", "inf"])
    assert args.run(args) == EXIT_USAGE
    assert "request_timeout" in capsys.readouterr().err


def test_a_port_another_server_took_between_bind_and_listen_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two servers started on one port both bind it (SO_REUSEADDR, neither listening
    yet); the one that listens second printed its URL and then ran for ever without
    listening (uvloop's create_server swallowed listen's EADDRINUSE), engine loaded."""
    import threading

    import suffice.server.app as app_module
    from suffice.server import run

    other = run.bind("127.0.0.1", 0)
    port = other.getsockname()[1]
    config = ServeConfig(gates=("sufficiency",), port=port, request_timeout=1.0)
    real = app_module.create_app

    def the_other_listens_first(*args: object, **kwargs: object) -> object:
        other.listen()  # the other server got there between this one's bind and its listen
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(app_module, "create_app", the_other_listens_first)
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            run.serve(config, lambda message: None)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    try:
        thread.start()
        thread.join(20)
    finally:
        other.close()
    assert [getattr(error, "parameter", None) for error in errors] == ["port"]


def test_an_audit_log_that_refuses_the_key_fails_before_the_engine_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong --audit-key was found only once the engine had loaded (a minute on a GPU)."""
    import suffice.server.service as service
    from suffice.audit import AuditLog
    from suffice.config import JudgeConfig
    from tests.batch.test_runner import good
    from tests.fakes import ScriptedEngine

    AuditLog(tmp_path / "audit.db", b"a" * 32).close()
    started: list[object] = []

    def make_engine(config: object) -> ScriptedEngine:
        started.append(config)
        return ScriptedEngine(good)

    monkeypatch.setattr(service, "make_engine", make_engine)
    config = ServeConfig(
        judge=JudgeConfig(), gates=("sufficiency",), audit_db=tmp_path / "audit.db", audit_key=b"b" * 32
    )
    with pytest.raises(ConfigError) as caught:
        service.GateService.open(config)
    assert caught.value.parameter == "audit_key"
    assert started == []
