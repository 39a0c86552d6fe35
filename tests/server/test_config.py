"""``suffice serve``'s settings: a bad value is refused before the engine starts,
as a :class:`~suffice.exceptions.ConfigError` naming the setting."""

from __future__ import annotations

import pytest

from suffice.cli.exit_codes import EXIT_USAGE
from suffice.cli.main import build_parser
from suffice.exceptions import ConfigError
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
