"""vLLM 0.33.0's engine configuration for the CPU-offloading peer (run in bench/.venv-vllm).

Builds what vLLM's ``EngineCore`` would hand its ``Scheduler`` for a one-layer full-attention
model on the CPU, with no weights and no tokenizer: a ``VllmConfig`` whose ``ModelConfig`` reads
a tiny Llama ``config.json`` written to a temporary directory (vLLM inspects the architecture
once and caches it under ``~/.cache/vllm``), prefix caching on, KV-cache events through the
``zmq`` publisher on the given endpoints, and the ``OffloadingConnector`` (``kv_both``) with
its default CPU spec sized to ``num_cpu_blocks`` chunks of one GPU block each; a
``KVCacheConfig`` of ``num_gpu_blocks`` blocks. Every other setting is vLLM's default, except
``async_scheduling`` off: the peer drives ``schedule()`` and ``update_from_output`` in turn.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.config.kv_events import KVEventsConfig
from vllm.utils.math_utils import round_up
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

MAX_MODEL_LEN = 4096
LAYER = "model.layers.0.self_attn.attn"
_TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "num_hidden_layers": 1,
    "vocab_size": 4096,
    "max_position_embeddings": MAX_MODEL_LEN,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
}


@dataclass(frozen=True, slots=True)
class OffloadSetup:
    """What the peer's engine run is made of (see the module docstring)."""

    endpoint: str
    replay_endpoint: str
    num_gpu_blocks: int
    num_cpu_blocks: int
    self_describing: bool = False
    block_size: int = 16
    max_num_seqs: int = 4


def _model_dir() -> str:
    """A directory holding the tiny model's ``config.json`` (made once per process)."""
    where = Path(tempfile.mkdtemp(prefix="swa-es-vllm-offload-"))
    (where / "config.json").write_text(json.dumps(_TINY_LLAMA))
    return str(where)


_MODEL_DIR: list[str] = []


def kv_cache_spec(block_size: int) -> FullAttentionSpec:
    """The one full-attention layer's KV-cache spec."""
    return FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=8, dtype=torch.float16
    )


def build(setup: OffloadSetup) -> tuple[VllmConfig, KVCacheConfig]:
    """The engine's ``VllmConfig`` and ``KVCacheConfig`` for ``setup``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not _MODEL_DIR:
        _MODEL_DIR.append(_model_dir())
    spec = kv_cache_spec(setup.block_size)
    # CPUOffloadingSpec sizes its pool in bytes: whole chunks of one GPU block, aligned.
    chunk_bytes = round_up(spec.page_size_bytes, CPUOffloadingSpec.BLOCK_SIZE_ALIGNMENT)
    extra: dict[str, object] = {"cpu_bytes_to_use": setup.num_cpu_blocks * chunk_bytes}
    if setup.self_describing:
        extra["self_describing_kv_events"] = True
    cache = CacheConfig(block_size=setup.block_size, enable_prefix_caching=True)
    cache.num_gpu_blocks = setup.num_gpu_blocks
    config = VllmConfig(
        model_config=ModelConfig(
            model=_MODEL_DIR[0],
            skip_tokenizer_init=True,
            dtype="float16",
            max_model_len=MAX_MODEL_LEN,
        ),
        cache_config=cache,
        device_config=DeviceConfig(device="cpu"),
        scheduler_config=SchedulerConfig(
            max_model_len=MAX_MODEL_LEN,
            is_encoder_decoder=False,
            max_num_seqs=setup.max_num_seqs,
            async_scheduling=False,
        ),
        kv_transfer_config=KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config=extra,
        ),
        kv_events_config=KVEventsConfig(
            enable_kv_cache_events=True,
            publisher="zmq",
            endpoint=setup.endpoint,
            replay_endpoint=setup.replay_endpoint,
            buffer_steps=100_000,
        ),
    )
    kv_cache = KVCacheConfig(
        num_blocks=setup.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec([LAYER], spec)],
    )
    return config, kv_cache
