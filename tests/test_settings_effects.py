"""Each setting changes what docs/CONFIGURATION.md says it does.

One table: a setting's value, a scenario run once with the defaults and once with that value,
and what the scenario shows in each case. The graph's settings run against a real graph file;
the memory service's through the whole in-process stack. ``OBSERVED_ELSEWHERE`` names the test
that shows each remaining setting's effect (a real supervisord, a model download, a host), and
a test checks that together they cover the registry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from keymem.protocol.endpoints import Endpoints, inproc_endpoints
from keymem.protocol.worker import HeartbeatPolicy
from keymem.services import reranker
from keymem.services.config import REGISTRY, Settings, load
from keymem.services.graph import GraphService
from keymem.services.graph.profile import key_profile_of
from keymem.services.stack import InprocStack
from tests.full_stack import FullStack, start_services
from tests.graph_helpers import GRAPH_FILE
from tests.vectors import remember_body, vector

TESTS = Path(__file__).resolve().parent
STRAWBERRY = "The user likes strawberries"


# -- the graph: a real graph file per scenario ------------------------------------------------
def semantic_match(query: str) -> Callable[[Any], bool]:
    """Whether a query reaches the strawberry key by meaning (no shared words)."""

    def scenario(graph_: GraphService) -> bool:
        graph_.remember(remember_body(STRAWBERRY, ["strawberry"]))
        found = graph_.match_keys({"vector": vector(query)})["keys"]
        return any(k["concept"] == "strawberry" for k in found)

    return scenario


def keys_after_saving(first: str, second: str) -> Callable[[Any], int]:
    """How many keys two memories keyed with near-synonyms leave (1: they merged)."""

    def scenario(graph_: GraphService) -> int:
        graph_.remember(remember_body(f"note about {first}", [first]))
        graph_.remember(remember_body(f"another note about {second}", [second]))
        return int(graph_.counts({})["keys"])

    return scenario


def learned_alias(graph_: GraphService) -> str | None:
    """What three confirmed reads through a semantic match teach (espresso -> coffee 0.72)."""
    saved = graph_.remember(remember_body("The user drinks coffee black", ["coffee"]))["saved"]
    learned = None
    for _ in range(3):
        coffee = graph_.match_keys({"vector": vector("espresso"), "text": "espresso"})["keys"][0]
        read = graph_.read_memory({"memory_id": saved, "via_key_id": coffee["key_id"]})
        learned = read.get("learned_alias")
    return learned


def fruit_is_a_hub(graph_: GraphService) -> bool:
    for content in ("Apples are a fruit", "Pears are a fruit"):
        graph_.remember(remember_body(content, ["fruit"]))
    return bool(graph_.browse_keys({})["keys"][0]["is_hub"])


def keys_of_another_model(graph_: GraphService) -> bool:
    """A graph whose keys come from bge-m3 applies bge-m3's key recall (0.62): "fruit" (0.555
    from strawberry) no longer reaches the key, with no setting at all."""
    graph_.remember(remember_body(STRAWBERRY, ["strawberry"], fingerprint="onnx:bge-m3:fp32"))
    return bool(graph_.match_keys({"vector": vector("fruit")})["keys"])


@dataclass(frozen=True)
class Effect:
    env: dict[str, str]
    scenario: Callable[[Any], Any]
    default: Any  # what the scenario shows with every setting at its default
    configured: Any  # and with ``env``


GRAPH_EFFECTS = {
    # "berry" is at cosine 0.72 from strawberry: over the profile's 0.45, under 0.85
    "KEYMEM_KEY_RECALL": Effect(
        {"KEYMEM_KEY_RECALL": "0.85"}, semantic_match("berry"), default=True, configured=False
    ),
    # bge-m3's calibrated key recall is 0.62: "fruit" (0.555) stops matching
    "KEYMEM_KEY_PROFILE": Effect(
        {"KEYMEM_KEY_PROFILE": "bge-m3"}, semantic_match("fruit"), default=True, configured=False
    ),
    "KEYMEM_SHORT_KEY_MERGE": Effect(  # colour ~ color: 0.967, under the profile's 0.98
        {"KEYMEM_SHORT_KEY_MERGE": "0.95"},
        keys_after_saving("colour", "color"),
        default=2,
        configured=1,
    ),
    "KEYMEM_KEY_MERGE": Effect(  # 0.934, under the profile's 0.96 for long keys
        {"KEYMEM_KEY_MERGE": "0.92"},
        keys_after_saving("New York City trip", "trip to New York City"),
        default=2,
        configured=1,
    ),
    "KEYMEM_ALIAS_FLOOR": Effect(
        {"KEYMEM_ALIAS_FLOOR": "0.9"}, learned_alias, default="espresso", configured=None
    ),
    "KEYMEM_KEY_HUB_MIN_LINKS": Effect(
        {"KEYMEM_KEY_HUB_MIN_LINKS": "2"}, fruit_is_a_hub, default=False, configured=True
    ),
    "KEYMEM_KEY_PROFILE unset": Effect(
        {"KEYMEM_KEY_PROFILE": "use-multilingual-v3"},
        keys_of_another_model,
        default=False,  # unset: the keys' own model
        configured=True,  # named: that model's thresholds, whatever the keys
    ),
}


@pytest.mark.parametrize("name", GRAPH_EFFECTS)
def test_a_graph_setting_changes_what_it_says(name: str, tmp_path: Path) -> None:
    effect = GRAPH_EFFECTS[name]
    shown = []
    for env, home in (({}, tmp_path / "default"), (effect.env, tmp_path / "configured")):
        home.mkdir()
        opened = GraphService(home / GRAPH_FILE, key_profile_of(load(env, home=home)))
        try:
            shown.append(effect.scenario(opened))
        finally:
            opened.close()
    assert shown == [effect.default, effect.configured]


# -- the memory service: the whole stack, once with the defaults, once configured -------------
NEWTON = "Isaac Newton saw an apple fall and described gravity"
# Its words hold two of the five it asks (newton, describ; not planet, moon, orbit): under
# inject's STRONG_COVERAGE, so the relevance floor decides (relevance about 0.56).
PROMPT = "what did Newton describe about planets, moons and orbits?"


@contextmanager
def configured_stack(home: Path, env: dict[str, str]) -> Iterator[FullStack]:
    """The real services in one process, built from ``env`` as a supervised start would."""
    settings = Settings(home, *_inproc(), load(env, home=home))
    with InprocStack(endpoints=settings.endpoints) as stack:
        own_reranker = any(name.startswith("KEYMEM_RERANK") for name in env)
        running = start_services(
            stack, settings, reranker.build(settings) if own_reranker else None
        )
        running.remember(NEWTON, ["Newton", "apple", "gravity"])
        yield running


def _inproc() -> tuple[Endpoints, HeartbeatPolicy]:
    return inproc_endpoints(), HeartbeatPolicy()


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., FullStack]]:
    """A stack per distinct set of settings, built on first use, kept for the module."""
    opened: dict[tuple[tuple[str, str], ...], FullStack] = {}
    with ExitStack() as exits:

        def stack_with(env: dict[str, str]) -> FullStack:
            key = tuple(sorted(env.items()))
            if key not in opened:
                home = tmp_path_factory.mktemp("stack")
                opened[key] = exits.enter_context(configured_stack(home, env))
            return opened[key]

        yield stack_with


def recall_preview(running: FullStack) -> bool:
    return bool(running.memory("recall", {"query": "Newton"})["memories"])


def injected(running: FullStack) -> int:
    return len(running.memory("inject", {"prompt": PROMPT})["memories"])


def read_teaches(running: FullStack) -> bool:
    """Whether reading what inject surfaced strengthens the path that surfaced it."""
    memory_id = running.memory("inject", {"prompt": PROMPT})["memories"][0]["id"]
    return "surfaced_path" in running.memory("read_memory", {"memory_id": memory_id})


STACK_EFFECTS = {
    # a cosine of 0.99 between a query and a memory is a paraphrase at least
    "KEYMEM_RERANK_MIN_SCORE": Effect(
        {"KEYMEM_RERANK_MIN_SCORE": "0.99"}, recall_preview, default=True, configured=False
    ),
    "KEYMEM_INJECT_MIN_RELEVANCE": Effect(
        {"KEYMEM_INJECT_MIN_RELEVANCE": "0.99"}, injected, default=1, configured=0
    ),
    "KEYMEM_LEARN_FROM_READS": Effect(
        {"KEYMEM_LEARN_FROM_READS": "false"}, read_teaches, default=True, configured=False
    ),
}


@pytest.mark.parametrize("name", STACK_EFFECTS)
def test_a_memory_service_setting_changes_what_it_says(
    name: str, stacks: Callable[..., FullStack]
) -> None:
    effect = STACK_EFFECTS[name]
    shown = [effect.scenario(stacks({})), effect.scenario(stacks(effect.env))]
    assert shown == [effect.default, effect.configured]


def test_the_process_settings_choose_endpoints_and_heartbeats(tmp_path: Path) -> None:
    tcp = {
        "KEYMEM_TRANSPORT": "tcp",
        "KEYMEM_TCP_INSECURE": "true",
        "KEYMEM_TCP_HOST": "localhost",
        "KEYMEM_TCP_PORT": "47900",
    }
    default = Settings.from_config(load({}, home=tmp_path)).endpoints
    assert default.frontend == f"ipc://{tmp_path}/run/router.sock"
    configured = Settings.from_config(load(tcp, home=tmp_path)).endpoints
    assert (configured.frontend, configured.backend) == (
        "tcp://localhost:47900",
        "tcp://localhost:47901",
    )
    # what a policy does with a silent peer: tests/test_router_inproc.py
    beats = {"KEYMEM_HEARTBEAT_MS": "200", "KEYMEM_HEARTBEAT_LIVENESS": "5"}
    assert Settings.from_config(load({}, home=tmp_path)).heartbeat.expiry_ms == 3_000
    assert Settings.from_config(load(beats, home=tmp_path)).heartbeat.expiry_ms == 1_000


# -- the rest, and that together they cover the registry ----------------------------------------
OBSERVED_ELSEWHERE: dict[str, tuple[str, str | None]] = {
    "KEYMEM_HOME": (
        "test_config.py",
        "test_keymem_home_comes_from_the_environment_and_finds_its_file",
    ),
    "KEYMEM_TRANSPORT": ("chaos/test_transport.py", None),
    "KEYMEM_TCP_HOST": (
        "test_settings_effects.py",
        "test_the_process_settings_choose_endpoints_and_heartbeats",
    ),
    "KEYMEM_TCP_PORT": ("chaos/test_transport.py", None),
    "KEYMEM_TCP_INSECURE": ("chaos/test_transport.py", None),
    "KEYMEM_CLIENT_KEY": ("test_curve.py", None),
    "KEYMEM_SHARED_MODEL": (
        "test_shared_model.py",
        "test_the_pair_shares_a_process_only_when_they_share_a_model",
    ),
    "KEYMEM_SLEEP_INTERVAL_H": (
        "test_sleep.py",
        "test_the_schedule_starts_a_pass_once_its_interval_has_passed",
    ),
    "KEYMEM_KEY_ANN_MIN_KEYS": (
        "test_key_ann.py",
        "test_the_threshold_decides_which_namespaces_get_an_index",
    ),
    "CLAUDE_CONFIG_DIR": (
        "test_install.py",
        "test_the_hosts_own_folder_variables_move_where_install_writes",
    ),
    "CODEX_HOME": (
        "test_install.py",
        "test_the_hosts_own_folder_variables_move_where_install_writes",
    ),
    "XDG_CONFIG_HOME": (
        "test_install.py",
        "test_claude_desktop_follows_xdg_and_a_symlinked_config_keeps_its_link",
    ),
    "KEYMEM_HEARTBEAT_MS": (
        "test_settings_effects.py",
        "test_the_process_settings_choose_endpoints_and_heartbeats",
    ),
    "KEYMEM_HEARTBEAT_LIVENESS": (
        "test_settings_effects.py",
        "test_the_process_settings_choose_endpoints_and_heartbeats",
    ),
    "KEYMEM_UP_TIMEOUT_S": (
        "test_config.py",
        "test_the_cli_exits_2_with_one_line_where_it_used_to_crash_at_import",
    ),
    "KEYMEM_AUTO_MIGRATE": ("test_migration.py", "test_up_refuses_or_migrates_a_switched_model"),
    "EMBEDDING_BACKEND": ("test_embedder_openai.py", "test_services_build_from_the_environment"),
    "LOCAL_EMBEDDING_MODEL": ("test_embedder_service.py", "test_settings_read_from_env"),
    "LOCAL_EMBEDDING_MODEL_PATH": ("test_embedder_onnx.py", None),
    "OPENAI_API_KEY": ("test_embedder_openai.py", "test_services_build_from_the_environment"),
    "OPENAI_BASE_URL": ("test_embedder_openai.py", "test_services_build_from_the_environment"),
    "OPENAI_EMBEDDING_MODEL": (
        "test_embedder_openai.py",
        "test_services_build_from_the_environment",
    ),
    "KEYMEM_EMBED_THREADS": ("test_embedder_service.py", "test_settings_read_from_env"),
    "KEYMEM_EMBED_BATCHING": ("test_embedder_service.py", "test_settings_read_from_env"),
    "KEYMEM_RERANK": ("test_embedder_openai.py", "test_services_build_from_the_environment"),
    "KEYMEM_RERANK_MODEL": ("test_reranker_cross_encoder.py", None),
    "KEYMEM_RERANK_MODEL_PATH": (
        "test_reranker_cross_encoder.py",
        "test_missing_reranker_dir_names_the_variable",
    ),
    "KEYMEM_LEARN_TTL_S": ("test_hebbian.py", "test_an_expired_surfacing_teaches_nothing"),
    "KEYMEM_LEARN_ASSOCIATE": ("test_hebbian.py", None),
    "KEYMEM_HOOK_TIMEOUT_MS": (
        "test_hook.py",
        "test_with_keymem_down_the_hook_is_silent_fast_and_counts_the_failure",
    ),
    "KEYMEM_HOOK_INSTALLED": ("test_mcp_stdio.py", None),
    "KEYMEM_TRANSCRIPT_ACCESS": (
        "test_mcp_tools.py",
        "test_saved_memories_carry_the_host_session_unless_gated_off",
    ),
    "CLAUDE_CODE_SESSION_ID": (
        "test_mcp_tools.py",
        "test_saved_memories_carry_the_host_session_unless_gated_off",
    ),
    "CODEX_THREAD_ID": (
        "test_mcp_tools.py",
        "test_saved_memories_carry_the_host_session_unless_gated_off",
    ),
}


# Settings whose effect no test pins, and why.
NOT_OBSERVED = {
    "KEYMEM_LOG_LEVEL": "only how much the services write to their logs",
    "KEYMEM_EMBED_CACHE": "only speed (test_embedder_service.py tests the cache itself)",
    "KEYMEM_RERANK_CACHE": "only speed (test_reranker_service.py tests a scorer without one)",
    "KEYMEM_RERANK_THREADS": "only a cross-encoder's speed",
}


def test_every_setting_has_its_effect_tested() -> None:
    here = {name.split()[0] for name in [*GRAPH_EFFECTS, *STACK_EFFECTS]}
    assert set(REGISTRY) == here | set(OBSERVED_ELSEWHERE) | set(NOT_OBSERVED)
    for name, (path, test) in OBSERVED_ELSEWHERE.items():
        text = (TESTS / path).read_text()
        if test:
            assert re.search(rf"^def {test}\(", text, re.M), f"{path}::{test} does not exist"
        else:
            assert name in text, f"{path} does not mention {name}"
