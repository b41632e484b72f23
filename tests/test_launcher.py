"""The launcher against a real deployment: a home with a ``%`` in its path, and version skew.

The deployment lives in a home whose path holds ``%`` (supervisord %-expands its config). A
launcher that believes it is another keymem (its identity handed in, as an upgraded install's
would differ) must restart the running services rather than talk to them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from keymem.protocol.client import Client
from keymem.services.config import Settings, load
from keymem.services.identity import Identity, this_install
from keymem.services.launcher import ensure_up
from keymem.services.supervision import Supervision
from tests.supervised import Deployment, running_deployment

pytestmark = pytest.mark.supervised

UP_TIMEOUT_S = 110.0  # model loading on a loaded machine
ELSEWHERE = Identity("0.0.0-previous", "/opt/old-keymem/lib/python3.11/site-packages/keymem")


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    # a home with supervisord's %-expansion characters in its path
    with running_deployment(prefix="km%d%(", up_timeout_s=UP_TIMEOUT_S) as deployed:
        yield deployed


def settings_of(deployment: Deployment) -> Settings:
    return Settings.from_config(load(deployment.env, home=deployment.home))


def router_version(deployment: Deployment) -> dict[str, object]:
    with Client(settings_of(deployment).endpoints.frontend) as client:
        found: dict[str, object] = client.call("router", "version")
    return found


def test_keymem_runs_in_a_home_with_percent_signs(deployment: Deployment) -> None:
    report = deployment.wait_all_running()
    assert report["home"] == str(deployment.home)
    assert report["keymem"] == this_install().to_wire()
    assert str(this_install().path) in deployment.keymem("status").stdout
    assert (deployment.home / "logs" / "graph.log").is_file()


def test_the_same_keymem_talks_to_the_running_services(deployment: Deployment) -> None:
    before = router_version(deployment)
    assert {k: before[k] for k in ("version", "path")} == this_install().to_wire()
    launch = ensure_up(settings_of(deployment), timeout_s=UP_TIMEOUT_S)
    assert (launch.started, launch.replaced) == (False, None)
    assert router_version(deployment)["pid"] == before["pid"]


def test_another_keymem_restarts_the_running_services(deployment: Deployment) -> None:
    settings = settings_of(deployment)
    supervisord = Supervision(settings).supervisord_pid()
    router = router_version(deployment)["pid"]
    notes: list[str] = []
    launch = ensure_up(settings, timeout_s=UP_TIMEOUT_S, identity=ELSEWHERE, announce=notes.append)
    assert launch.started and launch.replaced is not None
    assert this_install().describe() in launch.replaced
    assert ELSEWHERE.describe() in launch.replaced
    assert notes == [f"keymem: {launch.replaced}"]
    assert Supervision(settings).supervisord_pid() not in (None, supervisord)
    assert router_version(deployment)["pid"] != router
    deployment.wait_all_running()  # every program came back under the new supervisord
