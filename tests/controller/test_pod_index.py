"""The pod index (``controller.pod_index``): a pod event drops exactly the kept views that walking every view of
the namespace would (``PodsRead.touched_by`` on each: the rule before the index), no more and no fewer, through
views kept, replaced and dropped in any order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.controller.observer import PolicyObserver
from autoscaler.controller.pod_index import PodIndex
from autoscaler.controller.targets import PodsRead, TargetView
from autoscaler.core.model import ReplicaStatus

KEYS = ("app", "tier", "team")
VALUES = ("a", "b", "c")
PODS = tuple(f"pod-{i}" for i in range(6))
POLICIES = tuple(f"p{i}" for i in range(8))
NAMESPACES = ("llm", "bg")

labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
expressions = st.lists(
    st.fixed_dictionaries({
        "key": st.sampled_from(KEYS),
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
        "values": st.lists(st.sampled_from(VALUES), max_size=2),
    }),
    max_size=2,
)
selectors = st.one_of(
    st.just({}),
    st.builds(lambda ml: {"matchLabels": ml}, labels),
    st.builds(lambda ex: {"matchExpressions": ex}, expressions),
    st.builds(lambda ml, ex: {"matchLabels": ml, "matchExpressions": ex}, labels, expressions),
)
reads = st.one_of(
    st.none(),
    st.builds(PodsRead, st.sampled_from(NAMESPACES), selectors, st.frozensets(st.sampled_from(PODS), max_size=3)),
)
#: One step: keep a view for a policy (read from ``reads``), drop one as a target event does, or a pod event.
keep = st.tuples(st.just("keep"), st.sampled_from(POLICIES), reads)
#: The policies of the pod's namespace (``names``): mostly all of them, else some.
in_namespace = st.one_of(st.just(frozenset(POLICIES)), st.frozensets(st.sampled_from(POLICIES)))
pod = st.tuples(st.just("pod"), st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(PODS), labels, in_namespace),
                st.none())
steps = st.one_of(keep, keep, pod, pod, st.tuples(st.just("target"), st.sampled_from(POLICIES), st.none()))


def view(read: PodsRead | None) -> TargetView:
    return TargetView(ReplicaStatus(spec=1, ready=1), (), read)


def walked(observer: PolicyObserver, names: frozenset[str], namespace: str, pod: str,
           pod_labels: dict[str, str]) -> set[str]:
    """The rule before the index: every view of ``names`` judged with ``touched_by``."""
    return {
        n for n in names
        if (kept := observer.views.get(n)) is not None and (read := kept.view.read_from) is not None
        and read.namespace == namespace and read.touched_by(pod, pod_labels)
    }


def pod_event(namespace: str, name: str, pod_labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "labels": pod_labels}}


@settings(max_examples=200, deadline=None)
@given(st.lists(steps, min_size=10, max_size=40))
def test_a_pod_event_drops_the_views_walking_every_view_would_and_no_other(script: list[Any]) -> None:
    observer = PolicyObserver(targets=None, training=None, source=None)  # type: ignore[arg-type]
    for what, arg, read in script:
        if what == "keep":
            observer._keep(arg, observer._seq, 0.0, view(read))
        elif what == "target":
            observer.forget([arg])
        else:
            namespace, pod, pod_labels, names = arg
            expected = walked(observer, names, namespace, pod, pod_labels)
            before = dict(observer.views)
            dropped = observer.pod_changed(names, pod_event(namespace, pod, pod_labels))
            assert sorted(dropped) == sorted(expected)
            assert observer.views == {n: v for n, v in before.items() if n not in expected}


def test_a_view_is_found_by_a_pod_relabelled_out_of_its_selector_and_by_one_relabelled_in() -> None:
    """The two ways a pod touches a view, each on its own: listed by name (relabelled out, the selector no longer
    matches), and matching the selector (a pod the read never listed), among views it does not touch."""
    observer = PolicyObserver(targets=None, training=None, source=None)  # type: ignore[arg-type]
    names = frozenset({"mine", "other", "anything", "expr", "elsewhere"})
    observer._keep("mine", 0, 0.0, view(PodsRead("llm", {"matchLabels": {"app": "a", "tier": "b"}},
                                                 frozenset({"pod-0"}))))
    observer._keep("other", 0, 0.0, view(PodsRead("llm", {"matchLabels": {"app": "b"}}, frozenset({"pod-1"}))))
    observer._keep("anything", 0, 0.0, view(PodsRead("llm", {}, frozenset())))
    observer._keep("expr", 0, 0.0, view(PodsRead("llm", {"matchExpressions": [
        {"key": "team", "operator": "In", "values": ["x"]}]}, frozenset())))
    observer._keep("elsewhere", 0, 0.0, view(PodsRead("bg", {"matchLabels": {"app": "a"}}, frozenset({"pod-0"}))))
    # pod-0 relabelled out of "mine": found by its name; the empty selector matches every pod.
    assert sorted(observer.pod_changed(names, pod_event("llm", "pod-0", {"app": "z"}))) == ["anything", "mine"]
    # a new pod with the labels of "other" and "expr", never listed: found by the selectors (its labels in any
    # order: the pair "other" is filed under is not the first).
    assert sorted(observer.pod_changed(names, pod_event("llm", "pod-9", {"team": "x", "app": "b"}))) == [
        "expr", "other"]
    assert sorted(observer.views) == ["elsewhere"]


def test_a_replaced_view_is_filed_under_its_new_selector_only() -> None:
    index = PodIndex()
    index.add("p", PodsRead("llm", {"matchLabels": {"app": "a"}}, frozenset({"pod-0"})))
    index.add("p", PodsRead("llm", {"matchLabels": {"app": "b"}}, frozenset({"pod-1"})))
    assert list(index.candidates("llm", "pod-0", {"app": "a"})) == []
    assert list(index.candidates("llm", "pod-1", {"app": "b"})) == ["p", "p"]  # by name and by pair
    index.remove("p")
    assert index._namespaces == {}
