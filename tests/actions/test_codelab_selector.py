"""Issue 14: the shipped prefill/decode example selects the codelab's training JobSets, and only them."""

from __future__ import annotations

from pathlib import Path

from kubernetes_asyncio import client

from autoscaler.controller.workloads import KueueGate
from autoscaler.core.engine import compile_policy
from autoscaler.policyfile import loader
from tests.actions.policies import FAST_RETRY
from tests.kube import codelab, objects
from tests.kube.emulator import Emulator

EXAMPLE = Path(__file__).parents[2] / "policies" / "lws-prefill-decode.yaml"
NS = codelab.NAMESPACE


async def test_the_example_selects_the_codelab_jobsets_not_the_serving_groups(
    kube: Emulator, kube_client: client.ApiClient
) -> None:
    for obj in codelab.kueue_resources():
        kube.add(obj)
    sub = kube.add(codelab.subslicing_jobset())
    sup = kube.add(codelab.superslicing_jobset())
    decode = kube.add(codelab.vllm_lws("decode"))
    kube.add(objects.workload("jobset-kueue-jobset-simple-subslicing-1a2b3", NS, owner=sub, pods=12,
                              gpus_per_pod=4, resource="google.com/tpu", queue="lq"))
    kube.add(objects.workload("jobset-kueue-jobset-simple-superslicing-4c5d6", NS, owner=sup, pods=32,
                              gpus_per_pod=4, resource="google.com/tpu", queue="lq"))
    # A serving group's Workload, with the queue label copied onto it (Kueue's labelKeysToCopy can do that):
    # it shares the selector's label, yet it is never training.
    kube.add(objects.workload("leaderworkerset-kueue-vllm-decode-model-streamer-0-7e8f9", NS, owner=decode,
                              pods=2, gpus_per_pod=4, resource="google.com/tpu", queue="lq",
                              labels={"kueue.x-k8s.io/queue-name": "lq"}))
    policies = loader.load_file(EXAMPLE)
    assert [p.metadata.name for p in policies] == ["qwen-prefill", "qwen-decode"]
    gate = KueueGate(kube_client, retry=FAST_RETRY, now=lambda: 1796032800.0)
    for p in policies:
        found = await gate.find(compile_policy(p).policy.spec, owner=p.metadata.name)
        # Sub-slicing: 12 pods × 4 chips (six 2x2x2 slices); super-slicing: 32 pods × 4 (one 4x4x8).
        assert sorted((w.name, w.chips) for w in found) == [
            ("jobset-kueue-jobset-simple-subslicing-1a2b3", 48),
            ("jobset-kueue-jobset-simple-superslicing-4c5d6", 128),
        ]


def test_a_child_only_jobset_label_is_rejected_by_validate(tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace(
        "kueue.x-k8s.io/queue-name: lq", "jobset.sigs.k8s.io/jobset-name: kueue-jobset-simple-subslicing"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = loader.collect([str(bad)])
    assert not result.ok
    messages = [str(p) for p in result.problems]
    assert len(messages) == 2  # one per policy of the file
    assert all("spec.preemptible[0].selector" in m and "never on the JobSet" in m for m in messages)
