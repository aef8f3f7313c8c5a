"""Scenarios (`configs/scenarios/*.yaml`): what users send; `Scenario.requests` draws its `RequestTable`
(archsim/serving/draw.py).

    scenario:
      name: multiturn
      description: one line
      model: {preset: llama-3.1-70b, source: ...}        # a preset of archsim/models/presets
      arrivals:                                          # one arrival per session (a request without sessions)
        process: poisson                                 # poisson | gamma | closed_loop
        rate_per_s: 2.0                                  # poisson, gamma: sessions per second
        cv: 2.0                                          # gamma: coefficient of variation of inter-arrival times
        users: 16                                        # closed_loop: each user waits for its last answer ...
        think_time: 10s                                  # ... then thinks (a duration, or {dist: exponential, mean})
        source: ...
      input: {dist: lognormal, median: 1020, sigma: 1.1, source: ...}   # first-turn user tokens
      output: {dist: fixed, value: 215, source: ...}                    # tokens per answer
      sessions: {turns: 4, new_tokens: {dist: fixed, value: 70}, think_time: 30s, source: ...}
      shared_prefix: {tokens: 2048, fraction: 0.9, groups: 1, source: ...}
      reasoning: {fraction: 1.0, output: {dist: uniform, min: 8192, max: 32768}, source: ...}
      slo: {ttft: 2s, tpot: 200ms, source: ...}
      speculative: {k: 4, acceptance: 0.7, draft: llama-3.2-1b, source: ...}  # draft k, verify at once
      samples: {n: 8, source: ...}                       # or beam: {width, segment_tokens} or tree: {depth, width,
                                                         # backtrack, eval_tokens} / {parents, eval_tokens}, each with
                                                         # source: a program of rows forking from their parent's KV
      requests: {trace: PATH, format: mooncake, hash_block_tokens: 512, time_scale: 1.0, source: ...}
      # or {trace: PATH.npz, format: logical, think_time: 0s, source: ...} with `arrivals` (serving/logical.py)

Lengths (`input`, `output`, `sessions.turns`, `sessions.new_tokens`, `reasoning.output`): a positive integer,
or `{dist: fixed, value}`, `{dist: uniform, min, max}` (integers, inclusive), `{dist: lognormal, median, sigma}`
or `{dist: lognormal, mean, median}` (rounded, clipped to optional `min` (default 1) / `max` (default
2^31 - 1)), or `{dist: empirical, file: F.csv}` (a `tokens,weight` or `turns,weight` CSV, relative to the
scenario). Every top-level part carries `source:`, where its numbers come from. Turn k+1's prompt is turn k's
prompt + its answer + new tokens; it arrives `sessions.think_time` after turn k's last token. Errors are
ConfigErrors naming the file and key. A request's prompt without sessions: [shared prefix] + `input` tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from archsim.config.overrides import apply_overrides
from archsim.config.yaml_files import read_yaml, resolve_preset
from archsim.errors import ConfigError
from archsim.inputs import check_input, read_text_input
from archsim.limits import MAX_TOKENS
from archsim.resources import data_path
from archsim.section import Section
from archsim.serving.branching import KINDS as BRANCHING_KINDS
from archsim.serving.branching import Branching
from archsim.units import parse_time_ns

if TYPE_CHECKING:
    from archsim.serving.requests import RequestTable

SCENARIOS_DIR = data_path("configs", "scenarios")
PROCESSES = ("poisson", "gamma", "closed_loop")
DISTS = ("fixed", "uniform", "lognormal", "empirical")
TRACE_FORMATS = ("mooncake", "logical")
TRACE_SUFFIXES = (".jsonl", ".npz")
TRACE_FORM = "requests: {trace: PATH, format: mooncake|logical, hash_block_tokens: 512, time_scale: 1.0}"


@dataclass(frozen=True)
class LengthDist:
    """Token counts (or turns): one of DISTS; sample() returns int64 >= 1."""

    kind: str
    value: int = 0  # fixed
    low: int = 1  # uniform bounds; lognormal clip
    high: int = 0  # 0: no upper clip (lognormal)
    mu: float = 0.0  # lognormal: log of the median
    sigma: float = 0.0
    table_tokens: tuple[int, ...] = ()
    table_weights: tuple[float, ...] = ()
    table_file: str | None = field(default=None, compare=False)  # empirical: the CSV it was read from

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.value, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)
        if self.kind == "lognormal":  # without a max, clipped to the largest count a scenario holds
            x = np.rint(rng.lognormal(self.mu, self.sigma, size=n))
            return np.clip(x, self.low, self.high or MAX_TOKENS).astype(np.int64)
        p = np.asarray(self.table_weights) / math.fsum(self.table_weights)
        return rng.choice(np.asarray(self.table_tokens, dtype=np.int64), size=n, p=p)

    @property
    def mean(self) -> float:
        """The distribution's mean before clipping (for rates and reports; inf beyond a float)."""
        if self.kind == "lognormal":
            try:
                return math.exp(self.mu + self.sigma**2 / 2)
            except OverflowError:
                return math.inf
        return self.least_typical

    @property
    def least_typical(self) -> float:
        """A value at most the mean of what `sample` draws: a lognormal's median (below its mean, within its
        clip), every other distribution's mean."""
        if self.kind == "fixed":
            return float(self.value)
        if self.kind == "uniform":
            return (self.low + self.high) / 2
        if self.kind == "lognormal":
            return min(max(math.exp(self.mu), self.low), self.high or MAX_TOKENS)
        return float(np.dot(self.table_tokens, self.table_weights) / math.fsum(self.table_weights))


@dataclass(frozen=True)
class ThinkTime:
    kind: str  # fixed | exponential
    mean_ns: float

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed" or self.mean_ns == 0:
            return np.full(n, self.mean_ns, dtype=np.float64)
        return rng.exponential(self.mean_ns, size=n)


@dataclass(frozen=True)
class Arrivals:
    process: str
    rate_per_s: float | None  # poisson, gamma
    cv: float | None  # gamma
    users: int | None  # closed_loop
    think: ThinkTime | None  # closed_loop


@dataclass(frozen=True)
class Sessions:
    turns: LengthDist
    new_tokens: LengthDist
    think: ThinkTime


@dataclass(frozen=True)
class SharedPrefix:
    tokens: int
    fraction: float  # of sessions (of requests, without sessions) that start with a shared prefix
    groups: int  # distinct prefixes; a session with one picks a group uniformly


@dataclass(frozen=True)
class Reasoning:
    fraction: float  # of requests whose answer is a long reasoning output
    output: LengthDist


@dataclass(frozen=True)
class Slo:
    ttft_ns: float | None
    tpot_ns: float | None


@dataclass(frozen=True)
class Speculative:
    k: int  # tokens the draft proposes per verification step
    acceptance: float  # probability that the target accepts a draft token (i.i.d. until the first rejection)
    draft: str  # a preset of archsim/models/presets, sharing the target's vocabulary


@dataclass(frozen=True)
class TraceInput:
    path: str
    format: str
    hash_block_tokens: int
    time_scale: float  # mooncake: arrival = trace timestamp x time_scale (0.5: twice the rate)
    think: ThinkTime  # logical: between a turn's last token and the next turn


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    model: str  # a preset name of archsim/models/presets
    file: str | None
    arrivals: Arrivals | None  # None only for a Mooncake trace (its timestamps are the arrivals)
    input: LengthDist | None  # None for a trace
    output: LengthDist | None
    sessions: Sessions | None
    prefix: SharedPrefix | None
    reasoning: Reasoning | None
    slo: Slo | None
    trace: TraceInput | None
    speculative: Speculative | None = None
    branching: Branching | None = None  # best-of-N, beam or tree search programs (archsim.serving.branching)

    def summary(self) -> dict[str, Any]:
        """What a result entry says about its scenario (paths as archsim.resources.display_path names them)."""
        from archsim.resources import display_path

        return {"name": self.name, "file": None if self.file is None else display_path(self.file),
                "model": self.model, "trace": None if self.trace is None else display_path(self.trace.path),
                "slo_ttft_ms": None if self.slo is None or self.slo.ttft_ns is None else self.slo.ttft_ns / 1e6,
                "slo_tpot_ms": None if self.slo is None or self.slo.tpot_ns is None else self.slo.tpot_ns / 1e6}

    def input_files(self) -> list[str]:
        """Every file the scenario reads: itself, its trace, its length tables (no output may overwrite one)."""
        dists = [self.input, self.output, self.sessions and self.sessions.turns,
                 self.sessions and self.sessions.new_tokens, self.reasoning and self.reasoning.output]
        files = [self.file, self.trace and self.trace.path] + [d.table_file for d in dists if d]
        return [f for f in files if f]

    def requests(self, *, n_requests: int | None = None, duration_ns: float | None = None, seed: int = 0,
                 block_tokens: int = 16) -> RequestTable:
        """The requests of `n_requests` (or of every session starting before `duration_ns`), for `seed`."""
        from archsim.serving.draw import generate

        return generate(self, n_requests=n_requests, duration_ns=duration_ns, seed=seed, block_tokens=block_tokens)


def resolve_scenario_path(name_or_path: str | Path) -> Path:
    """A path, or a shipped scenario's name (`multiturn` -> configs/scenarios/multiturn.yaml)."""
    if Path(name_or_path).suffix in TRACE_SUFFIXES:
        raise ConfigError(f"a trace is not a scenario: name it inside one, as {TRACE_FORM}", file=str(name_or_path))
    return resolve_preset(name_or_path, SCENARIOS_DIR, "scenario")


def scenario_overrides(overrides: tuple[str, ...] | list[str]) -> list[str]:
    """The `--set` assignments that address the scenario (`scenario.arrivals.rate_per_s=2`)."""
    return [o for o in overrides if o.strip().startswith("scenario.")]


def load_scenario(name_or_path: str | Path, overrides: tuple[str, ...] | list[str] = ()) -> Scenario:
    """Read, override (`scenario.dotted.key=value`) and validate a scenario file."""
    path = resolve_scenario_path(name_or_path)
    tree = read_yaml(path)
    if isinstance(tree, dict):
        apply_overrides(tree, list(overrides), str(path))
    return scenario_from_mapping(tree, file=str(path))


def scenario_from_mapping(tree: Any, *, file: str | None = None) -> Scenario:
    top = Section(tree, "", file)
    root = top.sub("scenario")
    top.done()
    base = Path(file).resolve().parent if file else Path.cwd()
    name = root.name("name")
    description = root.str("description", "")
    model = _parse_model(root.sub("model"))
    trace = _parse_trace(root.sub("requests"), base) if root.has("requests") else None
    if trace is not None and trace.format == "mooncake":
        for key in ("arrivals", "input", "output", "sessions", "shared_prefix", "reasoning"):
            if root.has(key):
                raise root.error(key, "a Mooncake trace gives arrivals, lengths and shared blocks itself: drop this")
        arrivals = None
    else:
        arrivals = _parse_arrivals(root.sub("arrivals"))
    if trace is None:
        input_ = _parse_dist(root, "input", base, source=True)
        output = _parse_dist(root, "output", base, source=True)
        sessions = _parse_sessions(root.sub("sessions"), base) if root.has("sessions") else None
        prefix = _parse_prefix(root.sub("shared_prefix")) if root.has("shared_prefix") else None
        reasoning = _parse_reasoning(root.sub("reasoning"), base) if root.has("reasoning") else None
    else:
        for key in ("input", "output", "sessions", "shared_prefix", "reasoning"):
            if root.has(key):
                raise root.error(key, "the trace gives the requests' lengths and sessions: drop this")
        input_ = output = None
        sessions = prefix = reasoning = None
    slo = _parse_slo(root.sub("slo")) if root.has("slo") else None
    speculative = _parse_speculative(root.sub("speculative"), model) if root.has("speculative") else None
    branching = _parse_branching(root)
    if branching is not None and branching.verifier == model:  # the scenario's own model: the default
        branching = replace(branching, verifier=None)
    root.done()
    return Scenario(name, description, model, file, arrivals, input_, output, sessions, prefix, reasoning, slo, trace,
                    speculative, branching)


def _source(s: Section) -> None:
    value = s.raw("source")
    if not isinstance(value, str) or not value.strip():
        raise s.error("source", "expected a citation: where the numbers of this part come from")


def _parse_model(s: Section) -> str:
    from archsim.models import load_preset

    preset = s.str("preset")
    _source(s)
    s.done()
    try:
        load_preset(preset)
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=s.file, where=s.where("preset")) from None
    return preset


def _positive(s: Section, key: str, default: Any = ...) -> float:
    value = s.float(key) if default is ... else s.float(key, default)
    if not value > 0 or not math.isfinite(value):
        raise s.error(key, f"must be a positive number, got {value}")
    return value


def _count(s: Section, key: str, default: Any = ...) -> int:
    """A positive integer: a token count accepts 4096 or "4K" (x1024)."""
    value = s.raw(key) if default is ... else s.raw(key, default)
    if isinstance(value, str) and value.strip()[-1:] in ("K", "k") and value.strip()[:-1].strip().isdigit():
        value = int(value.strip()[:-1]) * 1024
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise s.error(key, f"must be a positive integer, got {value!r}")
    if value > MAX_TOKENS:
        raise s.error(key, f"{value:,} is beyond the largest count a scenario holds ({MAX_TOKENS:,})")
    return value


def _fraction(s: Section, key: str) -> float:
    value = s.float(key)
    if not 0 < value <= 1:
        raise s.error(key, f"must lie in (0, 1], got {value}")
    return value


def _duration(s: Section, key: str, *, positive: bool) -> float:
    value = s.raw(key)
    if not isinstance(value, str):
        raise s.error(key, f"expected a duration with a unit, like 2s or 200ms, got {value!r}")
    ns = s.parsed(key, parse_time_ns)
    if positive and ns <= 0:
        raise s.error(key, f"must be a positive duration, got {value!r}")
    return ns


def _parse_think(s: Section, key: str) -> ThinkTime:
    if not isinstance(s.raw(key), dict):
        return ThinkTime("fixed", _duration(s, key, positive=False))
    t = s.sub(key)
    kind = t.choice("dist", ("fixed", "exponential"))
    mean = _duration(t, "mean" if kind == "exponential" else "value", positive=False)
    t.done()
    return ThinkTime(kind, mean)


def _parse_arrivals(s: Section) -> Arrivals:
    process = s.choice("process", PROCESSES)
    rate = cv = users = think = None
    if process in ("poisson", "gamma"):
        rate = _positive(s, "rate_per_s")
        if process == "gamma":
            cv = _positive(s, "cv")
    else:
        users = _count(s, "users")
        think = _parse_think(s, "think_time")
    _source(s)
    s.done()
    return Arrivals(process, rate, cv, users, think)


def _parse_dist(parent: Section, key: str, base: Path, *, source: bool = False) -> LengthDist:
    value = parent.raw(key)
    if not isinstance(value, dict):
        if source:
            raise parent.error(key, "expected a mapping with `dist:` and `source:`")
        return LengthDist("fixed", value=_count(parent, key))
    s = parent.sub(key)
    kind = s.choice("dist", DISTS)
    if source:
        _source(s)
    if kind == "fixed":
        dist = LengthDist("fixed", value=_count(s, "value"))
    elif kind == "uniform":
        low, high = _count(s, "min"), _count(s, "max")
        if high < low:
            raise s.error("max", f"must be >= min ({low}), got {high}")
        dist = LengthDist("uniform", low=low, high=high)
    elif kind == "lognormal":
        dist = _parse_lognormal(s)
    else:
        dist = _parse_empirical(s, base)
    s.done()
    return dist


def _parse_lognormal(s: Section) -> LengthDist:
    median = _positive(s, "median")
    if median > MAX_TOKENS:
        raise s.error("median", f"{median:g} is beyond the largest count a scenario holds ({MAX_TOKENS:,})")
    if s.has("sigma") == s.has("mean"):
        raise s.error("sigma", "give exactly one of sigma or mean (with median)")
    if s.has("sigma"):
        sigma = _positive(s, "sigma")
    else:
        mean = _positive(s, "mean")
        if mean <= median:
            raise s.error("mean", f"a lognormal's mean exceeds its median ({median}), got {mean}")
        sigma = math.sqrt(2 * math.log(mean / median))  # mean = median x exp(sigma^2 / 2)
    low = _count(s, "min", 1)
    high = _count(s, "max") if s.has("max") else 0
    if high and high < low:
        raise s.error("max", f"must be >= min ({low}), got {high}")
    return LengthDist("lognormal", low=low, high=high, mu=math.log(median), sigma=sigma)


def _parse_empirical(s: Section, base: Path) -> LengthDist:
    name = s.str("file")
    path = Path(name) if Path(name).is_absolute() else base / name
    text = read_text_input(path, ConfigError, what="CSV")
    lines = text.splitlines()
    if not lines or [c.strip() for c in lines[0].split(",")] not in (["tokens", "weight"], ["turns", "weight"]):
        raise ConfigError("expected the header `tokens,weight` (or `turns,weight`)", file=str(path), where="line 1")
    tokens, weights = [], []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        try:
            t, w = int(cells[0]), float(cells[1])
            if len(cells) != 2:
                raise ValueError
        except (ValueError, IndexError):
            raise ConfigError(f"expected `tokens,weight` (an integer and a number), got {line!r}", file=str(path),
                              where=f"line {number}") from None
        if t <= 0 or not w > 0 or not math.isfinite(w):
            raise ConfigError(f"tokens and weight must be positive, got {line!r}", file=str(path),
                              where=f"line {number}")
        if t > MAX_TOKENS:
            raise ConfigError(f"{t:,} is beyond the largest count a scenario holds ({MAX_TOKENS:,})",
                              file=str(path), where=f"line {number}")
        tokens.append(t)
        weights.append(w)
    if not tokens:
        raise ConfigError("the table has no rows", file=str(path))
    return LengthDist("empirical", table_tokens=tuple(tokens), table_weights=tuple(weights), table_file=str(path))


def _parse_sessions(s: Section, base: Path) -> Sessions:
    turns = _parse_dist(s, "turns", base)
    new_tokens = _parse_dist(s, "new_tokens", base)
    think = _parse_think(s, "think_time")
    _source(s)
    s.done()
    return Sessions(turns, new_tokens, think)


def _parse_prefix(s: Section) -> SharedPrefix:
    tokens = _count(s, "tokens")
    fraction = _fraction(s, "fraction")
    groups = _count(s, "groups", 1)
    _source(s)
    s.done()
    return SharedPrefix(tokens, fraction, groups)


def _parse_reasoning(s: Section, base: Path) -> Reasoning:
    fraction = _fraction(s, "fraction")
    output = _parse_dist(s, "output", base)
    _source(s)
    s.done()
    return Reasoning(fraction, output)


def _parse_slo(s: Section) -> Slo:
    ttft = _duration(s, "ttft", positive=True) if s.has("ttft") else None
    tpot = _duration(s, "tpot", positive=True) if s.has("tpot") else None
    if ttft is None and tpot is None:
        raise s.error("ttft", "missing: give ttft, tpot or both (or drop slo)")
    _source(s)
    s.done()
    return Slo(ttft, tpot)


def _parse_speculative(s: Section, target: str) -> Speculative:
    from archsim.models import load_preset

    k = _count(s, "k")
    acceptance = s.float("acceptance")
    if not 0 <= acceptance <= 1:
        raise s.error("acceptance", f"must lie in [0, 1], got {acceptance}")
    draft = s.str("draft")
    try:
        vocab = load_preset(draft).hf_config_dict().get("vocab_size")
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=s.file, where=s.where("draft")) from None
    target_vocab = load_preset(target).hf_config_dict().get("vocab_size")
    if vocab != target_vocab:
        raise s.error("draft", f"{draft}'s vocabulary ({vocab} tokens) is not the target {target}'s "
                               f"({target_vocab}): a draft proposes the target's tokens")
    _source(s)
    s.done()
    return Speculative(k, acceptance, draft)


def _parse_branching(root: Section) -> Branching | None:
    """At most one of samples / beam / tree; programs draw their own prompts, not sessions or a trace's."""
    given = [k for k in BRANCHING_KINDS if root.has(k)]
    if not given:
        return None
    if len(given) > 1:
        raise root.error(given[1], f"give one of {', '.join(BRANCHING_KINDS)}, not {given[0]} and {given[1]}")
    kind = given[0]
    for other in ("sessions", "requests"):
        if root.has(other):
            raise root.error(kind, f"a {kind} program forks its own rows: it does not combine with {other}")
    s = root.sub(kind)
    if kind == "samples":
        b = Branching(kind, samples=_count(s, "n"))
    elif kind == "beam":
        b = Branching(kind, width=_count(s, "width"), segment_tokens=_count(s, "segment_tokens"))
    else:
        b = _parse_tree(s)
    _source(s)
    s.done()
    return b


def _parse_tree(s: Section) -> Branching:
    eval_tokens = s.raw("eval_tokens", 0)
    if isinstance(eval_tokens, bool) or not isinstance(eval_tokens, int) or eval_tokens < 0:
        raise s.error("eval_tokens", f"must be a non-negative integer, got {eval_tokens!r}")
    if s.has("parents"):
        for key in ("depth", "width", "backtrack"):
            if s.has(key):
                raise s.error(key, "parents gives the tree: drop depth, width and backtrack")
        parents = s.raw("parents")
        if not isinstance(parents, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parents):
            raise s.error("parents", f"expected a list of integers, got {parents!r}")
        from archsim.pnm.problem.reference import tree_error

        try:
            tree_error(parents)
        except ValueError as exc:
            raise s.error("parents", str(exc)) from None
        if parents.count(-1) != 1:
            raise s.error("parents", f"a search tree has one root (one -1), got {parents.count(-1)}")
        return Branching("tree", parents=tuple(parents), eval_tokens=eval_tokens, verifier=_verifier(s, eval_tokens))
    backtrack = s.float("backtrack", 0.0)
    if not 0 <= backtrack <= 1:
        raise s.error("backtrack", f"must lie in [0, 1], got {backtrack}")
    return Branching("tree", width=_count(s, "width"), depth=_count(s, "depth"), backtrack=backtrack,
                     eval_tokens=eval_tokens, verifier=_verifier(s, eval_tokens))


def _verifier(s: Section, eval_tokens: int) -> str | None:
    """`tree.verifier`: the evaluations' model, a preset; only with evaluations."""
    if not s.has("verifier"):
        return None
    from archsim.models import load_preset

    name = s.str("verifier")
    if not eval_tokens:
        raise s.error("verifier", "a verifier scores evaluations: set eval_tokens above 0")
    try:
        load_preset(name)
    except ConfigError as exc:
        raise ConfigError(exc.detail, file=s.file, where=s.where("verifier")) from None
    return name


def _parse_trace(s: Section, base: Path) -> TraceInput:
    name = s.str("trace")
    path = Path(name) if Path(name).is_absolute() else base / name
    try:
        check_input(path, ConfigError)
    except ConfigError as exc:
        raise s.error("trace", f"{exc.detail}: {exc.file or path}") from None
    fmt = s.choice("format", TRACE_FORMATS)
    only = {"mooncake": ("hash_block_tokens", "time_scale"), "logical": ("think_time",)}
    for other, keys in only.items():
        for key in keys:
            if fmt != other and s.has(key):
                raise s.error(key, f"only for format: {other}")
    hash_block = _count(s, "hash_block_tokens", 512) if fmt == "mooncake" else 0
    scale = _positive(s, "time_scale", 1.0) if fmt == "mooncake" else 1.0
    think = _parse_think(s, "think_time") if s.has("think_time") else ThinkTime("fixed", 0.0)
    _source(s)
    s.done()
    return TraceInput(str(path), fmt, hash_block, scale, think)
