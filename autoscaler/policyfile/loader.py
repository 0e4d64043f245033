"""Loading policy files into ``core.spec.ScalingPolicy`` models, with a file/line/column for every problem.

API (stable): ``load_file(path) -> list[ScalingPolicy]`` and ``load_paths(paths) -> list[LoadedPolicy]``,
raising ``PolicyFileError`` whose ``problems`` are ``Problem(file, line, column, path, message)``;
``collect(paths) -> LoadResult`` returns the problems instead of raising (what ``autoscaler validate`` uses);
``owner_conflicts(policies)`` is the cross-file check on its own; ``load_model(path, Model)`` loads a
one-document YAML file of any pydantic model with the same limits and positions.

How a file is read, in order, each step able to stop that file with a problem instead of an exception:
  1. at most ``MAX_FILE_BYTES`` are read; larger files are refused (say which limit);
  2. UTF-8 only (a BOM is allowed); the offending byte's line and column are reported;
  3. PyYAML *composes* the documents: nodes, not Python objects, so every value keeps its ``start_mark``;
  4. the node graph is checked before anything is built from it: duplicate keys, nesting depth, and the
     number of nodes once aliases are expanded (a "billion laughs" document is a few lines of text that
     expands to 10⁹ nodes; composing shares alias nodes, so measuring is cheap, but pydantic would walk
     every expansion), and recursive aliases;
  5. each document is sorted: empty ones are skipped, ``kind: ScalingPolicy`` (or no kind, or an
     ``autoscaler.dev`` apiVersion) is validated, manifests of well-known Kubernetes kinds are skipped so a
     policy may live beside its Deployment in one file, and any other kind is reported as not a
     ScalingPolicy (it is most likely a misspelt kind, and silently ignoring it would drop a policy);
  6. pydantic validates; each error's location (pydantic's, minus the discriminator tags it inserts, plus
     the field a ``FieldError`` names) is mapped back through the nodes to a line and column.
Across all files: a policy name may be used once, and a scale target may have one policy only (two
controllers scaling one Deployment fight, as HPA and KEDA do when both are pointed at it).

Directories are searched recursively for ``*.yaml`` and ``*.yml``, in sorted order, skipping entries whose
name starts with a dot: a ConfigMap mounted as a volume holds every file twice, once under ``..data/``.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import types
import typing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from autoscaler import forked
from autoscaler.core.fast import collector_paused
from autoscaler.core.policies.disaggregated import DisaggregatedPolicyConfig
from autoscaler.core.spec import API_VERSION, ScalingPolicy
from autoscaler.core.specbase import MAX_NUMBER, NUMBERS_SHOWN_FINE, FieldError, number_keys
from autoscaler.policyfile import files, plainyaml, scalars

#: Policy files are small (the examples are 2-4 KiB); a bigger file is a mistake (a log, a dump) and is not
#: parsed at all. Pure-Python PyYAML composes about 64 KiB per second, so this bounds a worst case to ~4 s.
MAX_FILE_BYTES = files.MAX_YAML_BYTES
#: Nodes a file may hold once aliases are expanded; a large policy file has a few hundred.
MAX_NODES = 100_000
#: Nesting depth of YAML collections; a policy nests about eight deep.
MAX_DEPTH = 50

#: Kinds skipped without complaint when they share a file with policies (see the module docstring).
KUBERNETES_KINDS = frozenset(
    {
        # core and apps
        "ConfigMap", "CronJob", "DaemonSet", "Deployment", "HorizontalPodAutoscaler", "Ingress", "Job",
        "Namespace", "NetworkPolicy", "PersistentVolumeClaim", "Pod", "PodDisruptionBudget", "PriorityClass",
        "ReplicaSet", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "Secret", "Service",
        "ServiceAccount", "StatefulSet", "CustomResourceDefinition",
        # the ecosystem around our targets: Kueue, LWS, JobSet, GMP, KEDA, Gateway API, kustomize
        "AdmissionCheck", "ClusterQueue", "LocalQueue", "ResourceFlavor", "Topology", "Workload",
        "WorkloadPriorityClass", "LeaderWorkerSet", "JobSet", "PodMonitoring", "ClusterPodMonitoring",
        "ScaledObject", "ScaledJob", "Gateway", "HTTPRoute", "InferencePool", "Kustomization",
    }
)

#: Shown as the field path of problems that are about the file or its YAML rather than one field.
FILE_PATH = "(file)"
YAML_PATH = "(yaml)"

Loc = tuple[str | int, ...]
M = TypeVar("M", bound=pydantic.BaseModel)


@dataclass(frozen=True)
class Problem:
    """One thing wrong, at a 1-based line and column; ``path`` is the field (camelCase, ``a.b[0].c``) or
    ``(file)`` / ``(yaml)`` for problems with the file or its YAML rather than one field."""

    file: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.path}: {self.message}"


class PolicyFileError(Exception):
    """Raised by ``load_file``/``load_paths``/``load_model``; ``str()`` is one line per problem."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class LoadedPolicy:
    """A valid policy and where it came from (``line``: where its document starts)."""

    policy: ScalingPolicy
    file: str
    line: int


@dataclass(frozen=True)
class LoadResult:
    """Everything ``collect`` found: the valid policies, the problems, and the files it read."""

    policies: list[LoadedPolicy]
    problems: list[Problem]
    files: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def load_file(path: str | Path) -> list[ScalingPolicy]:
    return [lp.policy for lp in load_paths([path])]


def load_paths(paths: Sequence[str | Path]) -> list[LoadedPolicy]:
    result = collect(paths)
    if result.problems:
        raise PolicyFileError(result.problems)
    return result.policies


def collect(paths: Sequence[str | Path]) -> LoadResult:
    """Load every policy under ``paths`` (files or directories), returning problems rather than raising."""
    problems: list[Problem] = []
    files = list(_expand(paths, problems))
    loaded: list[_Loaded] = []
    # Thousands of policies are a great many objects kept (pydantic models, YAML nodes until each file is
    # done): the cyclic collector would traverse them again and again as they pile up.
    with collector_paused():
        for f in files:
            loaded.extend(_load_one(f, problems))
    problems.extend(_conflicts([lp.claim for lp in loaded]))
    problems.sort(key=lambda p: (p.file, p.line, p.column))
    bad_files = {p.file for p in problems}
    # A policy from a file with problems is not returned: callers act on all of a file or none of it.
    policies = [LoadedPolicy(lp.policy, lp.file, lp.line) for lp in loaded if lp.file not in bad_files]
    return LoadResult(policies, problems, files)


@dataclass(frozen=True, slots=True)
class Claim:
    """What ``check`` keeps of a valid policy: its name, its ``spec.target`` (``target``), every scale target it
    owns (``targets``: that one or, for a policy with several targets, each variant's), and where it is
    (``line``: where its document starts)."""

    name: str
    target: str
    targets: tuple[str, ...]
    file: str
    line: int
    #: Where the name and each target are written, for problems across files; None when not looked up yet
    #: (``_spots`` finds them, reading the file again, when a clash must be reported).
    spots: _Spots | None


@dataclass(frozen=True)
class CheckResult:
    """What ``check`` found: ``collect``'s problems, in the same order, with each valid policy's ``Claim``."""

    policies: list[Claim]
    problems: list[Problem]
    files: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


#: ``check`` splits the files over two processes from this many files on. Below it, forking and sending the
#: answers back cost more than the half of the work they save (a file takes about 0.4 ms: estimate, measured
#: on the 5,000-policy bench).
SPLIT_FROM_FILES = 200


def check(paths: Sequence[str | Path], *, split: bool = True) -> CheckResult:
    """``collect`` for ``autoscaler validate``: the same problems in the same order, and each valid policy's
    ``Claim`` instead of its model. With ``split`` and many files on a machine with two cores or more, a forked
    child checks the second half of the files while this process checks the first; the halves' problems are
    joined in file order, so the result is the one this process would give alone (a child that fails gives
    nothing, and its half is checked here)."""
    problems: list[Problem] = []
    files = list(_expand(paths, problems))
    half = len(files) // 2
    child = None
    if split and len(files) >= SPLIT_FROM_FILES and forked.cores() >= 2:
        child = forked.Child(_check_files, files[half:])
    with child or contextlib.nullcontext():
        if child is not None and child.started:
            first = _check_files(files[:half])
            answer = child.result()
            second = answer[0] if answer is not None else _check_files(files[half:])
            shards = [first, second]
        else:
            shards = [_check_files(files)]
    claims: list[Claim] = []
    for shard_problems, shard_claims in shards:
        problems.extend(shard_problems)
        claims.extend(shard_claims)
    problems.extend(_conflicts(claims))
    problems.sort(key=lambda p: (p.file, p.line, p.column))
    bad_files = {p.file for p in problems}
    return CheckResult([c for c in claims if c.file not in bad_files], problems, files)


def _check_files(files: Sequence[str]) -> tuple[list[Problem], list[Claim]]:
    problems: list[Problem] = []
    claims: list[Claim] = []
    with collector_paused():  # as in ``collect``; the models are dropped as soon as their claim is taken
        for f in files:
            claims.extend(lp.claim for lp in _load_one(f, problems))
    return problems, claims


def load_text(text: str, source: str) -> list[LoadedPolicy]:
    """Policies from text that is no file: a ``ScalingPolicy`` object read from the API server, rendered as
    YAML. ``source`` names it in problems (``ScalingPolicy llm/tgi-gemma:7:3: spec.minReplicas: ...``)."""
    problems: list[Problem] = []
    state = _FileState(source, problems)
    loaded = [
        lp for i, (node, data) in enumerate(_compose(text, state))
        if (lp := _document(node, i, state, data)) is not None
    ]
    if not loaded and not problems:
        state.add(None, FILE_PATH, "no ScalingPolicy document")
    if problems:
        raise PolicyFileError(problems)
    return [LoadedPolicy(lp.policy, lp.file, lp.line) for lp in loaded]


# --- finding files -------------------------------------------------------------------------------------


def _expand(paths: Sequence[str | Path], problems: list[Problem]) -> Iterator[str]:
    seen: set[object] = set()
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(_walk(path), key=lambda f: f.parts)  # Path order, without Path's costlier comparisons
            if not found:
                problems.append(Problem(str(p), 1, 1, FILE_PATH, "no *.yaml or *.yml files in this directory"))
            candidates: Iterable[Path] = found
        elif path.exists():
            candidates = [path]
        else:
            problems.append(Problem(str(p), 1, 1, FILE_PATH, "no such file or directory"))
            continue
        for c in candidates:
            key = _identity(c)
            if key not in seen:  # the same file named twice would otherwise clash with itself
                seen.add(key)
                yield str(c)


def _identity(path: Path) -> object:
    """What makes two names one file: its device and inode (one ``stat``; ``realpath`` costs one per path
    component), or the resolved path when it cannot be stat'ed (a dangling link: reading it reports why)."""
    try:
        info = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return (info.st_dev, info.st_ino)


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if not name.startswith(".") and name.endswith((".yaml", ".yml")):
                yield Path(dirpath) / name


# --- one file ------------------------------------------------------------------------------------------


@dataclass
class _Loaded:
    policy: ScalingPolicy
    file: str
    line: int
    #: Its name, targets and where they are written, for problems across files. Kept instead of the
    #: document's nodes: thousands of policies' nodes would be most of a load's memory.
    claim: Claim


@dataclass
class _FileState:
    file: str
    problems: list[Problem]
    budget: int = MAX_NODES
    kinds_skipped: list[str] = field(default_factory=list)

    def add(self, mark: yaml.Mark | None, path: str, message: str) -> None:
        if mark is None:
            self.add_at(1, 1, path, message)
        else:
            self.add_at(mark.line + 1, mark.column + 1, path, message)

    def add_at(self, line: int, column: int, path: str, message: str) -> None:
        self.problems.append(Problem(self.file, line, column, path, message))


def _load_one(file: str, problems: list[Problem]) -> list[_Loaded]:
    state = _FileState(file, problems)
    before = len(problems)
    text = _read_text(file, state)
    if text is None:
        return []
    if NATIVE_YAML:
        quick = _valid_plain_policy(text, state)
        if quick is not None:
            return [quick]
    out: list[_Loaded] = []
    for index, (node, data) in enumerate(_compose(text, state)):
        loaded = _document(node, index, state, data)
        if loaded is not None:
            out.append(loaded)
    if not out and len(problems) == before:
        skipped = f" (skipped: {', '.join(sorted(set(state.kinds_skipped)))})" if state.kinds_skipped else ""
        state.add(None, FILE_PATH, f"no ScalingPolicy documents{skipped}")
    return out


#: Whether ``_load_one`` first tries ``plainyaml`` (a native parser that builds plain values); tests turn it off
#: to compare.
NATIVE_YAML = plainyaml.AVAILABLE


def _valid_plain_policy(text: str, state: _FileState) -> _Loaded | None:
    """The common case at a fraction of the cost: a file that is one ScalingPolicy document, read by the native
    parser (``plainyaml``: only where it reads as PyYAML does), that pydantic finds valid. It has nothing to
    report, so it needs no line or column but where its document starts; where its name and targets are
    written is found only if another policy clashes with it (``Claim.spots`` is None until then). Anything
    else answers ``None`` and the file is read the usual way, which reports every problem exactly as before."""
    parsed = plainyaml.load(text, max_depth=MAX_DEPTH, max_nodes=MAX_NODES, watch=number_keys(), bound=MAX_NUMBER)
    if parsed is None:
        return None
    data = parsed.value
    kind, api = data.get("kind"), data.get("apiVersion")
    if not (isinstance(kind, str) or kind is None) or not (isinstance(api, str) or api is None):
        return None  # ``_document`` reads the header from the node's text: leave the rare odd header to it
    if kind is None and api is None:
        return None
    if not (kind in (None, "ScalingPolicy") or (api or "").startswith(API_VERSION.split("/")[0] + "/")):
        return None
    # Every number field's value plain and in range (the walk looked): the models' number check cannot refuse
    # anything here, so it is skipped (specbase.NUMBERS_SHOWN_FINE); otherwise it runs as always.
    context = NUMBERS_SHOWN_FINE if parsed.watched_plain else None
    try:
        policy = ScalingPolicy.model_validate(data, context=context)
    except pydantic.ValidationError:
        return None
    line = _document_line(text)
    return _Loaded(policy, state.file, line, _claim(policy, state.file, line, None))


#: What a line may start with and not be content: a space, a comment, or a line break (every one ``splitlines``
#: splits at), and the empty text.
_NOT_CONTENT = frozenset(" #\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029") | {""}


def _document_line(text: str) -> int:
    """The line PyYAML's mark gives the one document of a text ``plainyaml`` took: its first line that is not
    blank or a comment (such a text has no ``---``, directive, tab or odd line break)."""
    if text[:1] not in _NOT_CONTENT:
        return 1  # the usual case, without splitting the whole text: its first line starts with content
    for number, line in enumerate(text.splitlines(), 1):
        content = line.lstrip(" ")
        if content and content[0] != "#":
            return number
    return 1


def _read_text(file: str, state: _FileState) -> str | None:
    try:
        # Regular files only (a FIFO or /dev/zero would block or never end), at most MAX_FILE_BYTES.
        data = files.read_bytes(file, limit=MAX_FILE_BYTES, what="YAML")
    except files.InputError as exc:
        state.add(None, FILE_PATH, exc.reason)
        return None
    if data[:2] == files.GZIP_MAGIC:
        state.add(None, FILE_PATH, f"gzip-compressed; decompress it first (gunzip -k {file})")
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        prefix = data[: exc.start]
        line = prefix.count(b"\n") + 1
        column = exc.start - (prefix.rfind(b"\n") + 1) + 1
        state.add_at(
            line,
            column,
            FILE_PATH,
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}",
        )
        return None


#: ``_plain_data``'s answer for a document it leaves to the full checks and PyYAML's constructor.
_UNUSUAL: Any = object()
_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_NULL = "tag:yaml.org,2002:null"


class _SlowLoader(scalars.Resolving, yaml.SafeLoader):
    """PyYAML's pure-Python safe loader, reading plain scalars that start like a number as kubectl does
    (``scalars``)."""


for _tag, _construct in scalars.CONSTRUCTORS.items():
    _SlowLoader.add_constructor(_tag, _construct)

_SCALARS = {
    "tag:yaml.org,2002:null": yaml.SafeLoader.construct_yaml_null,
    scalars.BOOL_TAG: scalars.construct_bool,
    scalars.INT_TAG: scalars.construct_int,
    scalars.FLOAT_TAG: scalars.construct_float,
}
_CONSTRUCTOR = _SlowLoader("")


def _compose(text: str, state: _FileState) -> list[tuple[Node, Any]]:
    """Every document's node tree, up to the first YAML error (which is reported), each with its plain data
    when the fast path built it (else ``_UNUSUAL``: ``_document`` then checks the graph and constructs).

    The fast path: libyaml (``yaml.CSafeLoader``, ~20× faster than the pure-Python parser) composes, when it
    is installed and the text cannot nest deeper than it can take; its nodes carry the same marks. It is kept
    only when every document is plain (``_plain_data``); on any error or anything unusual the text is parsed
    again by the pure-Python parser, so that every problem is worded and placed as that parser does (libyaml
    words errors differently, and takes a few inputs PyYAML refuses; tests/policyfile/test_fast_yaml.py)."""
    if _fast_yaml_ok(text):
        fast = _compose_fast(text, state)
        if fast is not None:
            return fast
    return [(node, _UNUSUAL) for node in _compose_slow(text, state)]


def _compose_fast(text: str, state: _FileState) -> list[tuple[Node, Any]] | None:
    try:
        nodes = [n for n in yaml.compose_all(text, Loader=_FastLoader) if n is not None]
    except yaml.YAMLError:
        return None
    out: list[tuple[Node, Any]] = []
    budget = state.budget
    anchors = "&" in text
    for node in nodes:
        if isinstance(node, ScalarNode) and node.tag == _NULL:
            out.append((node, None))  # an empty document
            continue
        if not isinstance(node, MappingNode):
            return None
        data, count = _plain_data(node, anchors)
        if data is _UNUSUAL or count > budget:
            return None
        budget -= count
        out.append((node, data))
    state.budget = budget
    return out


#: libyaml's composer recurses in C with no depth check: tens of thousands of nested ``[`` crash the
#: process (measured: 10,000 levels parse, 100,000 segfault). It is used only below this bound.
FAST_YAML_MAX_DEPTH = 1000
#: Implicit tags of plain scalars already resolved: (value, implicit) -> tag. Short values only (keys, numbers,
#: names repeat across documents; long text rarely does), and a bounded count.
_TAGS: dict[tuple[str, tuple[bool, bool]], str] = {}
_TAGS_MAX, _TAG_VALUE_MAX = 20_000, 64
#: Plain scalars other than strings already constructed: (tag, value) -> the int, float, bool or None PyYAML's
#: constructor made of them (``15``, ``0.8``, ``true`` repeat across documents). Short values, bounded count.
_SCALAR_VALUES: dict[tuple[str, str], Any] = {}
_SCALAR_VALUES_MAX = 20_000

try:

    class _MemoLoader(scalars.Resolving, yaml.CSafeLoader):
        """libyaml's safe loader with PyYAML's tag resolution memoized. The composer asks the (Python)
        resolver for every scalar, and walks its path-resolver stack for every node: a third of composing.
        With no path resolvers (the safe loader has none) a scalar's tag depends on its value and
        ``implicit`` only, so it is resolved once per distinct short value; the answer is the resolver's own.
        """

        # Only path resolvers use the stack, and there are none: the composer's two calls per node do nothing.
        # Built-in callables that ignore their arguments (a dict's get, a tuple's length) rather than Python
        # methods: the composer makes these calls from C a million times for 5,000 policies, and a built-in
        # is called without making a Python frame. Not methods, so the instance is not passed.
        descend_resolver: Any = {}.get  # (parent, index) -> index, never looked up: the dict is empty
        ascend_resolver: Any = ().__len__

        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            if kind is not ScalarNode or len(value) > _TAG_VALUE_MAX:
                return super().resolve(kind, value, implicit)
            key = (value, implicit)
            tag = _TAGS.get(key)
            if tag is None:
                tag = super().resolve(kind, value, implicit)
                if len(_TAGS) < _TAGS_MAX:
                    _TAGS[key] = tag
            return tag

    assert not yaml.CSafeLoader.yaml_path_resolvers  # what makes the memo and the no-op stack exact
    _FastLoader: Any = _MemoLoader
    FAST_YAML = True
except AttributeError:  # PyYAML built without libyaml
    _FastLoader = None
    FAST_YAML = False


#: Where libyaml and PyYAML part ways: libyaml takes some tabs PyYAML refuses (``a: b\t``), reads a BOM inside
#: the text as a document boundary, and treats control characters and the Unicode line breaks its own way.
#: A policy has no business holding any of them; a text that does goes the pure-Python way.
_ODD_CHARACTERS = re.compile("[\t\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufeff\u2028\u2029\ufffe\uffff]")


def _fast_yaml_ok(text: str) -> bool:
    """Whether libyaml may parse ``text``: installed, and the nesting is bounded. A flow collection nests one
    level per ``[`` or ``{``; a block collection is indented deeper than its parent (``- - x`` moves right on
    one line), so its depth is at most the longest line's length. Their sum bounds the depth."""
    if not FAST_YAML or _ODD_CHARACTERS.search(text):
        return False
    flow = text.count("[") + text.count("{")
    longest = max(map(len, text.splitlines()), default=0)
    return flow + longest <= FAST_YAML_MAX_DEPTH


def _compose_slow(text: str, state: _FileState) -> list[Node]:
    nodes: list[Node] = []
    try:
        for node in yaml.compose_all(text, Loader=_SlowLoader):
            if node is not None:
                nodes.append(node)
    except yaml.MarkedYAMLError as exc:
        state.add(exc.problem_mark or exc.context_mark, YAML_PATH, _yaml_message(exc))
    except yaml.reader.ReaderError as exc:
        # Raised for control characters; it carries a character offset, not a mark.
        prefix = text[: exc.position]
        line, column = prefix.count("\n") + 1, exc.position - (prefix.rfind("\n") + 1) + 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        state.add_at(line, column, YAML_PATH, f"unacceptable character {char!r} (U+{ord(char):04X}): {exc.reason}")
    except yaml.YAMLError as exc:
        state.add(None, YAML_PATH, f"not valid YAML: {exc}")
    except RecursionError:
        # PyYAML's composer recurses once per nesting level.
        state.add(None, YAML_PATH, f"nested too deeply (the limit is {MAX_DEPTH} levels)")
    return nodes


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    parts = [exc.problem or "", exc.context or ""]
    text = "; ".join(p for p in parts if p) or "not valid YAML"
    if "'\\t'" in text:
        text += " (YAML is indented with spaces, never tabs)"
    return text


def _document(node: Node, index: int, state: _FileState, data: Any) -> _Loaded | None:
    if isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null":
        return None  # an empty document, e.g. a trailing '---'
    if not isinstance(node, MappingNode):
        what = "a list" if isinstance(node, SequenceNode) else f"a scalar ({node.value!r:.40})"
        state.add(node.start_mark, YAML_PATH, f"document {index + 1} is {what}, not a mapping")
        return None
    if data is _UNUSUAL and not _check_graph(node, state):
        return None
    kind = _scalar(node, "kind")
    api = _scalar(node, "apiVersion")
    if kind is None and api is None:
        # Not even the header: one clear line rather than pydantic's four "missing" and N "unknown field".
        state.add(
            node.start_mark,
            YAML_PATH,
            f"no apiVersion and kind; a policy starts with 'apiVersion: {API_VERSION}' and 'kind: ScalingPolicy'",
        )
        return None
    is_ours = kind in (None, "ScalingPolicy") or (api or "").startswith(API_VERSION.split("/")[0] + "/")
    if not is_ours:
        if kind in KUBERNETES_KINDS:
            state.kinds_skipped.append(str(kind))
            return None
        close = difflib.get_close_matches(str(kind), ["ScalingPolicy"], n=1, cutoff=0.6)
        hint = "; did you mean 'ScalingPolicy'?" if close else ""
        if kind == "List":  # ``kubectl get scalingpolicies -o yaml`` of several objects
            hint = "; a kubectl List: write each of its items as a document of its own, separated by ---"
        state.add(
            _find(node, ("kind",)).start_mark,
            "kind",
            f"not a ScalingPolicy: kind {kind!r}{hint} (only well-known Kubernetes kinds may share a policy file)",
        )
        return None
    policy = _validate(node, ScalingPolicy, state, data)
    if policy is None:
        return None
    spots = _Spots(_at(node, NAME_LOC), _at(node, TARGET_LOC), _pool_spots(node, policy))
    line = node.start_mark.line + 1
    return _Loaded(policy, state.file, line, _claim(policy, state.file, line, spots))


def _pool_spots(node: MappingNode, policy: ScalingPolicy) -> tuple[tuple[str, tuple[int, int]], ...]:
    """Where each variant of a policy with several targets names its target: ``(target key, (line, col))``."""
    config = policy.spec.policy
    if not isinstance(config, DisaggregatedPolicyConfig):
        return ()
    out: list[tuple[str, tuple[int, int]]] = []
    for role in ("prefill", "decode"):
        for i, variant in enumerate(config.role(role).variants):
            out.append((variant.target.ref().key, _at(node, ("spec", "policy", role, "variants", i, "target"))))
    return tuple(out)


def _validate(node: MappingNode, model: type[M], state: _FileState, data: Any = _UNUSUAL) -> M | None:
    """Build the document (already graph-checked; ``data`` when ``_plain_data`` built it) and validate it as
    ``model``, reporting each error."""
    if data is _UNUSUAL:
        try:
            data = _SlowLoader("").construct_document(node)
        except yaml.MarkedYAMLError as exc:  # unknown tags such as !Ref, unhashable keys
            state.add(exc.problem_mark or exc.context_mark, YAML_PATH, _yaml_message(exc))
            return None
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        for err in exc.errors():
            _report(err, data, node, model, state)
        return None


def load_model(path: str | Path, model: type[M]) -> M:
    """Load a one-document YAML file of any pydantic model, with the same limits and FILE:LINE:COL problems
    as policy files (for the simulator's cluster and profile files, say). Raises ``PolicyFileError``."""
    problems: list[Problem] = []
    state = _FileState(str(path), problems)
    text = _read_text(state.file, state)
    parsed = _compose(text, state) if text is not None else []
    documents = [n for n, _ in parsed if not (isinstance(n, ScalarNode) and n.tag == _NULL)]
    data = next((d for n, d in parsed if n is documents[0]), _UNUSUAL) if documents else _UNUSUAL
    result: M | None = None
    if problems:
        pass  # unreadable, or not YAML: already reported
    elif len(documents) != 1:
        where = documents[1].start_mark if documents else None
        state.add(where, YAML_PATH, f"expected one document (a {model.__name__}), found {len(documents)}")
    elif not isinstance(documents[0], MappingNode):
        state.add(documents[0].start_mark, YAML_PATH, f"expected a mapping (a {model.__name__})")
    elif data is not _UNUSUAL or _check_graph(documents[0], state):
        result = _validate(documents[0], model, state, data)
    if result is None:
        raise PolicyFileError(problems)
    return result


def locate(path: str | Path, loc: Loc) -> tuple[int, int] | None:
    """Where the field at ``loc`` (``("spec", "profilesFile")``) is written in a one-document file that
    ``load_model`` already read: its 1-based (line, column), or None when the file no longer parses. For an
    error found after loading (a file the field names) that should point at the field."""
    state = _FileState(str(path), [])
    text = _read_text(state.file, state)
    parsed = _compose(text, state) if text is not None else []
    roots = [n for n, _ in parsed if isinstance(n, MappingNode)]
    return _at(roots[0], loc) if len(roots) == 1 and not state.problems else None


# --- the node graph ------------------------------------------------------------------------------------



class _Unusual(Exception):
    """``_plain_data``'s walk met something it leaves to the full checks (a class made once: building it per
    document cost more than validating one)."""


def _plain_data(root: MappingNode, anchors: bool = True) -> tuple[Any, int]:
    """The common case in one walk: a document with no alias, no merge key, no tag beyond str, int, float, bool,
    null, map and seq, only scalar keys, no duplicate key, at most ``MAX_DEPTH`` deep and within the node
    budget gives the value PyYAML's ``SafeConstructor`` builds (calling its own methods for the scalars) with
    ``_check_graph``'s verdict (fine), at a fraction of their cost, and its node count. Anything else answers
    ``_UNUSUAL``, and the caller runs those two, which report every problem exactly as they always did.

    ``anchors``: whether the text may hold an anchor (``&``). Without one there is no alias (libyaml refuses an
    alias to an undefined anchor), so no node can be met twice and the walk need not remember the nodes."""
    walk = _Walk(anchors)
    try:
        return _build(root, 0, walk), walk.count
    except (_Unusual, RecursionError):
        return _UNUSUAL, walk.count


class _Walk:
    """``_plain_data``'s state. A module-level walk over an object, not a recursive closure: a closure that calls
    itself refers to itself through its cell, one reference cycle per document, which only the cyclic collector
    (paused while loading) would free."""

    __slots__ = ("anchors", "count", "seen")

    def __init__(self, anchors: bool) -> None:
        self.anchors = anchors
        self.seen: set[int] = set()
        self.count = 0


def _build(node: Node, depth: int, walk: _Walk) -> Any:
    if depth > MAX_DEPTH:
        raise _Unusual
    if walk.anchors:
        if id(node) in walk.seen:  # an alias (a node met twice)
            raise _Unusual
        walk.seen.add(id(node))
    walk.count += 1
    tag, kind = node.tag, type(node)
    if kind is ScalarNode:
        if tag == _STR:
            return node.value
        key = (tag, node.value)
        if key in _SCALAR_VALUES:
            return _SCALAR_VALUES[key]
        construct = _SCALARS.get(tag)
        if construct is None:
            raise _Unusual
        try:
            value = construct(_CONSTRUCTOR, node)  # type: ignore[arg-type]  # node is a ScalarNode (type() above)
        except yaml.YAMLError:
            raise _Unusual from None  # an explicit tag on what it cannot be (!!int abc): reported the usual way
        if len(_SCALAR_VALUES) < _SCALAR_VALUES_MAX and len(node.value) <= _TAG_VALUE_MAX:
            _SCALAR_VALUES[key] = value  # an int, float, bool or None: immutable, safe to share
        return value
    if kind is MappingNode and tag == _MAP:
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            name = key_node.value
            if key_node.tag != _STR or type(key_node) is not ScalarNode or name in out:
                raise _Unusual  # merge keys, non-string or unhashable keys, duplicates
            if walk.anchors:
                if id(key_node) in walk.seen:
                    raise _Unusual
                walk.seen.add(id(key_node))
            walk.count += 1
            out[name] = _build(value_node, depth + 1, walk)
        return out
    if kind is SequenceNode and tag == _SEQ:
        return [_build(child, depth + 1, walk) for child in node.value]
    raise _Unusual


def graph_problems(node: Node, file: str) -> list[Problem]:
    """The limits ``validate`` applies to one composed YAML document (nesting depth, node count counting alias
    expansions, recursive aliases, duplicate keys), for YAML files other commands read their own way."""
    problems: list[Problem] = []
    _check_graph(node, _FileState(file, problems))
    return problems




def _check_graph(root: Node, state: _FileState) -> bool:
    """Duplicate keys, depth, alias expansion and recursion; True when the document may be built."""
    # id(node) -> (nodes in it, its height); an alias reuses the node, so each is measured once.
    measured: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    ok = True

    def too_deep(node: Node, path: Loc) -> _Stop:
        return _Stop(node.start_mark, _render(path), f"nested too deeply (the limit is {MAX_DEPTH} levels)")

    def size(node: Node, depth: int, path: Loc) -> tuple[int, int]:
        nonlocal ok
        if id(node) in measured:
            total, height = measured[id(node)]
            if depth + height > MAX_DEPTH:  # an alias can put a deep node deeper still
                raise too_deep(node, path)
            return total, height
        if id(node) in on_path:
            raise _Stop(node.start_mark, _render(path), "recursive alias: a node contains itself")
        if depth > MAX_DEPTH:
            raise too_deep(node, path)
        on_path.add(id(node))
        total, height = 1, 0
        children: list[tuple[Node, Loc]] = []
        if isinstance(node, SequenceNode):
            children = [(child, (*path, i)) for i, child in enumerate(node.value)]
        elif isinstance(node, MappingNode):
            first: dict[str, yaml.Mark] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, ScalarNode) else None
                if name is not None and key.tag != "tag:yaml.org,2002:merge":
                    if name in first:
                        ok = False
                        state.add(key.start_mark, _render((*path, name)),
                                  f"duplicate key {name!r} (first at line {first[name].line + 1})")
                    else:
                        first[name] = key.start_mark
                children += [(key, path), (value, (*path, name if name is not None else "?"))]
        for child, child_path in children:
            child_total, child_height = size(child, depth + 1, child_path)
            total += child_total
            height = max(height, child_height + 1)
        on_path.discard(id(node))
        measured[id(node)] = total, height
        if total > state.budget:
            raise _Stop(
                root.start_mark, YAML_PATH,
                f"more than {MAX_NODES} YAML nodes in this file, counting each alias expansion (a YAML bomb?)",
            )
        return total, height

    try:
        state.budget -= size(root, 0, ())[0]
    except _Stop as stop:
        state.add(stop.mark, stop.path, stop.message)
        return False
    return ok


class _Stop(Exception):
    def __init__(self, mark: yaml.Mark, path: str, message: str) -> None:
        super().__init__(message)
        self.mark, self.path, self.message = mark, path, message


def _scalar(node: MappingNode, key: str) -> str | None:
    value = _find(node, (key,))
    return str(value.value) if isinstance(value, ScalarNode) else None


def _find(root: Node, loc: Loc, *, key: bool = False) -> Node:
    """The node at ``loc``, or the deepest existing ancestor; with ``key``, the last step's key node."""
    node = root
    for i, step in enumerate(loc):
        child: Node | None = None
        if isinstance(node, MappingNode):
            for k, v in reversed(node.value):
                if isinstance(k, ScalarNode) and k.value == str(step):
                    child = k if key and i == len(loc) - 1 else v
                    break
        elif isinstance(node, SequenceNode) and isinstance(step, int) and 0 <= step < len(node.value):
            child = node.value[step]
        if child is None:
            return node
        node = child
    return node


# --- pydantic errors -----------------------------------------------------------------------------------


def _report(err: Any, data: Any, root: MappingNode, model: type[pydantic.BaseModel], state: _FileState) -> None:
    loc = _clean_loc(tuple(err["loc"]), data)
    kind: str = err["type"]
    ctx = err.get("ctx") or {}
    error = ctx.get("error")
    if isinstance(error, FieldError):
        loc = (*loc, *error.loc)
    message = _message(err, loc, data, model)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        loc = (*loc, str(ctx.get("discriminator", "'type'")).strip("'"))
    node = _find(root, loc, key=kind == "extra_forbidden")
    state.add(node.start_mark, _render(loc) or "(document)", message)


def _clean_loc(loc: Loc, data: Any) -> Loc:
    """pydantic's location minus the tags it inserts (a discriminated union adds the tag: ``policy.hpa``)."""
    out: list[str | int] = []
    cur: Any = data
    for i, step in enumerate(loc):
        if isinstance(cur, dict):
            if isinstance(step, str) and step == cur.get("type") and step not in cur:
                continue  # the discriminator tag of the union cur was validated as
            if step in cur:
                out.append(step)
                cur = cur[step]
            elif i == len(loc) - 1:
                out.append(step)  # a missing field
                cur = None
        elif isinstance(cur, list) and isinstance(step, int) and 0 <= step < len(cur):
            out.append(step)
            cur = cur[step]
    return tuple(out)


def _render(loc: Loc) -> str:
    text = ""
    for step in loc:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text


def _get(data: Any, loc: Loc) -> Any:
    for step in loc:
        in_dict = isinstance(data, dict) and step in data
        if in_dict or (isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data)):
            data = data[step]
        else:
            return None
    return data


def _message(err: Any, loc: Loc, data: Any, model: type[pydantic.BaseModel]) -> str:
    kind: str = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_fields(model, loc[:-1], data)
        hint = _exported(model, loc)
        if hint:
            return f"unknown field {loc[-1]!r}: {hint} (allowed: {', '.join(allowed)})"
        return f"unknown field {loc[-1]!r}{_suggest(str(loc[-1]), allowed, 'allowed')}"
    if kind == "missing":
        return f"missing required field {loc[-1]!r}" if loc else "missing required field"
    if kind == "union_tag_invalid":
        what = f"{loc[-1]} " if loc and isinstance(loc[-1], str) else ""
        known = sorted(re.findall(r"'([^']*)'", str(ctx.get("expected_tags", ""))))
        return f"unknown {what}type {ctx.get('tag')!r}{_suggest(str(ctx.get('tag')), known, 'known types')}"
    if kind == "union_tag_not_found":
        return "missing 'type'"
    if kind in ("literal_error", "enum"):
        expected = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return f"{value!r} is not allowed{_suggest(str(value), expected, 'allowed')}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"should be a mapping, not {_describe(value)}"
    if kind == "list_type":
        return f"should be a list, not {_describe(value)}"
    if kind in ("value_error", "assertion_error"):
        error = ctx.get("error")
        return str(error) if error is not None else str(err["msg"])
    if kind == "string_type" and isinstance(value, bool):
        # kubectl (go-yaml v2) and this loader read a plain y/n/yes/no/on/off/true/false as a boolean, which the
        # API server then refuses where the CRD says string.
        return (f"should be a string, not the boolean {str(value).lower()}: YAML reads a plain y, n, yes, no, on, "
                "off, true or false as a boolean (so does kubectl); put the text in quotes")
    message = str(err["msg"])
    message = message[:1].lower() + message[1:]
    if not isinstance(value, dict | list):
        message += f" (got {_describe(value)})"
    return message


#: ObjectMeta fields the API server writes (k8s.io/apimachinery pkg/apis/meta/v1 types.go): found in a policy
#: saved with ``kubectl get -o yaml``, and meaningless in a file (the policy's own fields say what it scales).
_SERVER_META = frozenset({
    "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
    "managedFields", "selfLink", "ownerReferences", "finalizers", "generateName",
})


def _exported(model: type[pydantic.BaseModel], loc: Loc) -> str:
    """What to do about a field of a policy saved from the cluster (``kubectl get -o yaml``), which a policy
    file does not hold: the server's metadata and status, and a namespace (the target's is
    ``spec.target.namespace``; robust3's sweep: each was "unknown field" with no word on why)."""
    if model is not ScalingPolicy:
        return ""
    if loc == ("status",) or (len(loc) == 2 and loc[0] == "metadata" and loc[1] in _SERVER_META):
        return "the API server writes it (a policy saved with kubectl get -o yaml): delete it"
    if loc == ("metadata", "namespace"):
        return "the namespace scaled is spec.target.namespace: write it there"
    return ""


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _suggest(word: str, choices: Sequence[str], label: str) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    lowered = [c for c in choices if c.lower() == word.lower()]  # catches case slips difflib scores low
    best = lowered[0] if lowered else (close[0] if close else None)
    listing = f"{label}: {', '.join(choices)}" if choices else ""
    if best is not None:
        return f"; did you mean {best!r}?" + (f" ({listing})" if len(choices) <= 12 and listing else "")
    return f"; {listing}" if listing else ""


def _allowed_fields(root: type[pydantic.BaseModel], loc: Loc, data: Any) -> list[str]:
    """The camelCase field names of the model at ``loc`` under ``root`` (following the data through unions)."""
    tp: Any = root
    for i in range(len(loc) + 1):
        tp = _unwrap(tp, _get(data, loc[:i]))
        if i == len(loc):
            break
        step = loc[i]
        if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
            info = next(
                (f for name, f in tp.model_fields.items() if step in (f.alias, name)), None
            )
            if info is None:
                return []
            tp = info.annotation
        elif typing.get_origin(tp) in (list, tuple) and typing.get_args(tp):
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) is dict and len(typing.get_args(tp)) == 2:
            tp = typing.get_args(tp)[1]
        else:
            return []
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        return [f.alias or name for name, f in tp.model_fields.items()]
    return []


def _unwrap(tp: Any, value: Any) -> Any:
    """Strip Annotated and Optional; pick a union member by the value's ``type`` field."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(members) == 1:
                tp = members[0]
                continue
            tag = value.get("type") if isinstance(value, dict) else None
            for m in members:
                fields = m.model_fields if isinstance(m, type) and issubclass(m, pydantic.BaseModel) else {}
                if "type" in fields and tag in typing.get_args(fields["type"].annotation):
                    return m
            return None
        return tp


# --- across files --------------------------------------------------------------------------------------


def owner_conflicts(policies: Sequence[LoadedPolicy]) -> list[Problem]:
    """Policies that reuse a name, or scale a target another policy already scales (in the given order).

    ``collect`` runs this over everything it loads; a caller that loads files one by one (the controller's
    reload) can run it over the union. Problems point at each later policy's first line.
    """
    return list(_conflicts([
        _claim(lp.policy, lp.file, lp.line, _Spots((lp.line, 1), (lp.line, 1))) for lp in policies
    ]))


NAME_LOC: Loc = ("metadata", "name")
TARGET_LOC: Loc = ("spec", "target")


@dataclass(frozen=True, slots=True)
class _Spots:
    name: tuple[int, int]
    target: tuple[int, int]
    #: A policy with several targets: where each of its other targets is named.
    pools: tuple[tuple[str, tuple[int, int]], ...] = ()


def _at(node: MappingNode, loc: Loc) -> tuple[int, int]:
    mark = _find(node, loc).start_mark
    return mark.line + 1, mark.column + 1


def _claim(policy: ScalingPolicy, file: str, line: int, spots: _Spots | None) -> Claim:
    # Every target of every policy has one owner: spec.target and, for a policy with several targets,
    # each variant's (a DisaggregatedPolicyConfig: each of its roles has at least one variant).
    primary = policy.spec.target.ref().key
    several = bool(spots.pools) if spots is not None else isinstance(policy.spec.policy, DisaggregatedPolicyConfig)
    keys = [t.ref().key for t in policy.spec.targets()] if several else [primary]
    return Claim(policy.metadata.name, primary, tuple(keys), file, line, spots)


def _spots(claim: Claim) -> _Spots:
    """Where ``claim``'s name and targets are written: kept from loading, or found by reading its file again
    the line-tracking way (a file that changed since, so that its document is no longer there, gives the
    document's first line for each)."""
    if claim.spots is not None:
        return claim.spots
    state = _FileState(claim.file, [])
    text = _read_text(claim.file, state)
    for node, data in _compose(text, state) if text is not None else []:
        if isinstance(node, MappingNode) and node.start_mark.line + 1 == claim.line:
            if data is _UNUSUAL and not _check_graph(node, state):
                break
            policy = _validate(node, ScalingPolicy, state, data)
            if policy is None or policy.metadata.name != claim.name:
                break
            return _Spots(_at(node, NAME_LOC), _at(node, TARGET_LOC), _pool_spots(node, policy))
    return _Spots((claim.line, 1), (claim.line, 1))


def _conflicts(claims: list[Claim]) -> Iterator[Problem]:
    names: dict[str, tuple[str, int]] = {}
    targets: dict[str, tuple[str, str, int]] = {}

    for claim in claims:
        name, file, line = claim.name, claim.file, claim.line
        spots = claim.spots
        if name in names:
            first_file, first_line = names[name]
            spots = spots or _spots(claim)
            row, col = spots.name
            yield Problem(file, row, col, "metadata.name",
                          f"policy name {name!r} is already used at {first_file}:{first_line}")
        else:
            names[name] = (file, line)
        primary = claim.target
        for key in claim.targets:
            if key in targets:
                owner, first_file, first_line = targets[key]
                spots = spots or _spots(claim)
                row, col = dict(spots.pools).get(key, spots.target) if key != primary else spots.target
                yield Problem(
                    file, row, col, "spec.target",
                    f"{key} is already scaled by policy {owner!r} ({first_file}:{first_line}); one policy per "
                    "scale target",
                )
            else:
                targets[key] = (name, file, line)
