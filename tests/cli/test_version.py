"""``suffice --version`` answers with the package's version, not a usage error."""

import pytest

import suffice
from suffice.cli.main import main


def test_version_prints_the_packages_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out.strip() == f"suffice {suffice.__version__}"
