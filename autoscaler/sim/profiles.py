"""Serving-replica profiles: what one replica of a model server on given hardware can do, as data.

A profile states the numbers the simulator needs and the assumptions behind them:

* ``slots``: sequences one replica runs concurrently (max batch / JetStream decode slots / vLLM max_num_seqs);
* ``prefillTokensPerSecond``: prompt tokens per second while prefilling (prefill runs one request at a time
  and pauses decoding, the prefill-first scheduling of TGI and JetStream);
* ``decodeStep``: the time of one decode step for a batch of ``b`` sequences, ``baseMs + perSequenceMs × b``
  (memory-bound weight reads plus per-sequence attention/KV reads); every running sequence gains one token;
* ``kvCacheTokens``: tokens of KV cache; a request is admitted only if its prompt and output fit;
* ``coldStart``: scheduling + image pull + model load, from admission to serving;
* ``maxConcurrentRequests``: requests one replica accepts (running + waiting) before it rejects the next
  (TGI ``--max-concurrent-requests``, default 128, answers "Model is overloaded"); absent = an unbounded
  waiting queue (vLLM queues beyond ``--max-num-seqs``; JetStream queues in its prefill backlog);
* ``contextTokens``: the longest prompt + output the server accepts (TGI ``--max-total-tokens``, vLLM
  ``--max-model-len``, JetStream ``max_target_length``); longer requests are rejected at once.

``docs/simulate.md`` explains how to calibrate each number from a real server's metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from autoscaler.core.specbase import SpecModel
from autoscaler.sim.yamldoc import SimFileError, load_model

Server = Literal["tgi", "vllm", "jetstream"]


class DecodeStepSpec(SpecModel):
    base_ms: float = Field(gt=0, description="Step time of a batch of one, minus one perSequenceMs.")
    per_sequence_ms: float = Field(ge=0, description="Extra step time per sequence in the batch.")

    def seconds(self, batch: int) -> float:
        return (self.base_ms + self.per_sequence_ms * batch) / 1000.0


class ColdStartSpec(SpecModel):
    scheduling_seconds: float = Field(ge=0, description="Pod scheduling (nodes already exist).")
    image_pull_seconds: float = Field(ge=0)
    model_load_seconds: float = Field(ge=0, description="Weights download + load + warm-up/compilation.")

    @property
    def total(self) -> float:
        return self.scheduling_seconds + self.image_pull_seconds + self.model_load_seconds


class Profile(SpecModel):
    server: Server = Field(description="Which server's metrics the simulated replica exports.")
    model: str
    hardware: str
    chips: int = Field(gt=0, description="Accelerator chips one replica (or LWS group) holds.")
    slots: int = Field(gt=0)
    #: At least 10 tokens/s: a rate of 0.001 made the oracle's lower bound walk millions of
    #: replica levels (one per replica a prefill deadline asks for) and ``simulate`` never ended.
    prefill_tokens_per_second: float = Field(ge=10, description="At least 10 (estimate: 500x below the bundled "
                                             "profiles' slowest, 5,000; a slower rate is a typo or another unit).")
    decode_step: DecodeStepSpec
    kv_cache_tokens: int = Field(gt=0)
    cold_start: ColdStartSpec
    max_concurrent_requests: int | None = Field(
        default=None, gt=0, description="Running + waiting requests a replica accepts; more are rejected."
    )
    context_tokens: int | None = Field(default=None, gt=0, description="Longest prompt + output accepted.")
    source: str = Field(default="", description="Where the numbers come from.")
    sources: dict[str, str] = Field(
        default_factory=dict,
        description="Per parameter (slots, prefillTokensPerSecond, decodeStep, kvCacheTokens, coldStart, "
                    "maxConcurrentRequests, contextTokens): a published source, or 'estimate: why'.",
    )
    assumptions: list[str] = Field(default_factory=list)

    def max_decode_tokens_per_second(self) -> float:
        """Decode throughput of a full batch: the replica's ceiling on generated tokens per second."""
        return self.slots / self.decode_step.seconds(self.slots)


#: The parameters every profile must give a source (or "estimate: …") for.
SOURCED = ("slots", "prefillTokensPerSecond", "decodeStep", "kvCacheTokens", "coldStart",
           "maxConcurrentRequests", "contextTokens")


class ProfileFile(SpecModel):
    profiles: dict[str, Profile] = Field(min_length=1)


def load(path: str | Path) -> dict[str, Profile]:
    """Read a profiles file; ``SimFileError`` with FILE:LINE:COL on problems."""
    return dict(load_model(path, ProfileFile).profiles)


__all__ = ["SOURCED", "ColdStartSpec", "DecodeStepSpec", "Profile", "ProfileFile", "SimFileError", "load"]
