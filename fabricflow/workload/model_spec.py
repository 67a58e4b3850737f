"""Transformer model specs read from Hugging Face ``config.json`` field names.

A :class:`ModelSpec` holds the shapes the step-time model needs: hidden size, layers,
attention heads (GQA via ``num_key_value_heads``, MLA via the DeepSeek fields), the FFN
(gated SwiGLU with three matrices for Llama/Mixtral/DeepSeek-style ``model_type``, plain
two-matrix GELU for GPT-2/GPT-NeoX-style ones, as Hugging Face builds them), vocabulary
and the MoE fields (``num_local_experts`` or ``n_routed_experts``, ``num_experts_per_tok``,
``moe_intermediate_size``, ``n_shared_experts``, ``first_k_dense_replace``).

``load_model(name_or_path)`` accepts a preset name (``ff.workload.list_models()``), a path
to a ``config.json`` / YAML file, or a dict with the same fields.

Example::

    spec = load_model("llama3-8b")
    spec.num_parameters()   # ~8.0e9
"""

from __future__ import annotations

import dataclasses
import math
from importlib import resources
from pathlib import Path
from typing import Any

from fabricflow.errors import SpecError
from fabricflow.files import is_file, read_structured

# model_type values whose FFN is gated (SwiGLU/GeGLU: gate, up, down matrices), as in the
# Hugging Face modeling files; everything GPT-2/GPT-NeoX/OPT/Falcon-like is two-matrix.
GATED_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "deepseek_v2",
        "deepseek_v3",
        "olmo",
        "olmo2",
        "olmoe",
        "phi3",
        "granite",
        "granitemoe",
        "dbrx",
        "jamba",
        "cohere",
        "internlm2",
        "yi",
        "baichuan",
        "gpt_oss",
    }
)
PLAIN_MODEL_TYPES = frozenset(
    {
        "gpt2",
        "gpt_neox",
        "gptj",
        "gpt_bigcode",
        "opt",
        "bloom",
        "falcon",
        "megatron_gpt",
        "gpt3",
        "bert",
        "gpt_neo",
        "starcoder",
        "phi",
        "mpt",
    }
)
GATED_ACTIVATIONS = frozenset({"silu", "swiglu", "swish", "geglu"})
# Activations of plain (two-matrix) FFNs, Hugging Face ``ACT2FN`` names.
PLAIN_ACTIVATIONS = frozenset(
    {
        "gelu",
        "gelu_new",
        "gelu_fast",
        "gelu_python",
        "gelu_pytorch_tanh",
        "gelu_accurate",
        "gelu_10",
        "quick_gelu",
        "relu",
        "relu2",
        "relu6",
        "leaky_relu",
        "elu",
        "selu",
        "mish",
        "tanh",
        "sigmoid",
        "linear",
    }
)
ATTENTION_IMPLEMENTATIONS = ("flash", "eager")
# model_type values whose attention applies rotary position embeddings to Q and K (the
# Hugging Face modeling files); GPT-2-style models use learned absolute positions.
ROPE_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "deepseek_v2",
        "deepseek_v3",
        "olmo",
        "olmo2",
        "olmoe",
        "phi3",
        "granite",
        "granitemoe",
        "dbrx",
        "cohere",
        "internlm2",
        "yi",
        "baichuan",
        "gpt_neox",
        "gptj",
        "gpt_oss",
        "falcon",
    }
)
# model_type values with a per-head RMSNorm on queries and keys (Qwen3, OLMo2, Gemma3).
QK_NORM_MODEL_TYPES = frozenset({"qwen3", "qwen3_moe", "olmo2", "gemma3"})


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder-only transformer (all sizes are element counts, not bytes).

    Attributes:
        name: preset or file name.
        model_type: Hugging Face ``model_type`` (``llama``, ``gpt2``, ``deepseek_v3``, ...).
        hidden_size, num_layers, num_heads, num_kv_heads, head_dim: attention shapes
            (``head_dim`` defaults to ``hidden_size / num_heads``).
        intermediate_size: dense FFN width.
        vocab_size: vocabulary (logits GEMM and embedding).
        gated_ffn: True for SwiGLU-style (3 matrices), False for GELU (2 matrices).
        tie_word_embeddings: input embedding shared with the output projection.
        num_experts, experts_per_token, moe_intermediate_size, num_shared_experts,
        first_dense_layers: MoE fields (``num_experts == 0`` means dense).
        q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim: MLA
            (``kv_lora_rank == 0`` means standard multi-head / grouped-query attention).
        attention: ``flash`` (fused, no s^2 tensors; causal tiles skipped) or ``eager``
            (materialised scores, softmax and dropout over s^2, as Megatron-LM did in 2021).
        hidden_dropout, attention_dropout: dropout probabilities (a dropout costs a mask
            write/read in memory-bound kernels; Hugging Face GPT-2 defaults to 0.1).
        rope: rotary position embeddings on Q and K (a memory-bound kernel per pass).
        qk_norm: per-head RMSNorm on Q and K (Qwen3).
        sliding_window: keys a query of a sliding-window layer attends to (0: none).
        sliding_layers: number of layers that use the sliding window (GPT-OSS alternates).
        mtp_layers: multi-token-prediction modules (DeepSeek-V3 ``num_nextn_predict_layers``):
            each adds one transformer layer and one output head on the last pipeline stage.
        routing_groups, routing_group_topk: group-limited routing (DeepSeek ``n_group``,
            ``topk_group``): experts form ``routing_groups`` groups and a token's experts come
            from at most ``routing_group_topk`` of them; deployed with one group per node,
            a token reaches at most that many nodes (DeepSeek-V3: 8 groups, 4 per token).
    """

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    gated_ffn: bool
    tie_word_embeddings: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    attention: str = "flash"
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    rope: bool = False
    qk_norm: bool = False
    sliding_window: int = 0
    sliding_layers: int = 0
    mtp_layers: int = 0
    routing_groups: int = 0
    routing_group_topk: int = 0

    def __post_init__(self) -> None:
        for field in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
        ):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise SpecError(f"model.{field}", f"must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise SpecError(
                "model.num_key_value_heads",
                f"{self.num_kv_heads} must divide num_attention_heads={self.num_heads}",
            )
        if self.num_experts:
            if not 0 < self.experts_per_token <= self.num_experts:
                raise SpecError(
                    "model.num_experts_per_tok",
                    f"must lie in 1..{self.num_experts}, got {self.experts_per_token}",
                )
            if self.moe_intermediate_size <= 0:
                raise SpecError("model.moe_intermediate_size", "must be > 0 for a MoE model")
            if not 0 <= self.first_dense_layers <= self.num_layers:
                raise SpecError("model.first_k_dense_replace", f"must lie in 0..{self.num_layers}")
        for field in (
            "sliding_window",
            "sliding_layers",
            "mtp_layers",
            "routing_groups",
            "routing_group_topk",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(f"model.{field}", f"must be an integer >= 0, got {value!r}")
        if self.sliding_layers > self.num_layers:
            raise SpecError("model.sliding_layers", f"must lie in 0..{self.num_layers}")
        if self.routing_groups and (
            self.num_experts % self.routing_groups
            or not 0 < self.routing_group_topk <= self.routing_groups
        ):
            raise SpecError(
                "model.n_group",
                f"{self.routing_groups} groups must divide the {self.num_experts} experts, "
                f"with 1..{self.routing_groups} groups per token (topk_group), "
                f"got {self.routing_group_topk}",
            )
        if self.attention not in ATTENTION_IMPLEMENTATIONS:
            raise SpecError(
                "model.attention",
                f"unknown {self.attention!r}; one of {list(ATTENTION_IMPLEMENTATIONS)}",
            )

    # ------------------------------------------------------------------ derived shapes
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def qk_head_dim(self) -> int:
        """Head dimension of queries/keys (MLA: nope + rope parts)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.is_mla else self.head_dim

    @property
    def kv_width(self) -> int:
        """Key and value elements per token that attention keeps, over all heads: what a
        context-parallel ring passes around (MLA: the decompressed per-head K and V)."""
        if self.is_mla:
            return self.num_heads * (self.qk_head_dim + self.value_head_dim)
        return 2 * self.num_kv_heads * self.head_dim

    def attention_weight_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of each attention projection matrix of one layer (unsharded)."""
        h, a = self.hidden_size, self.num_heads
        if self.is_mla:
            shapes = []
            if self.q_lora_rank:
                shapes += [(h, self.q_lora_rank), (self.q_lora_rank, a * self.qk_head_dim)]
            else:
                shapes += [(h, a * self.qk_head_dim)]
            shapes += [
                (h, self.kv_lora_rank + self.qk_rope_head_dim),
                (self.kv_lora_rank, a * (self.qk_nope_head_dim + self.v_head_dim)),
                (a * self.v_head_dim, h),
            ]
            return shapes
        d = self.head_dim
        return [(h, a * d), (h, 2 * self.num_kv_heads * d), (a * d, h)]

    def ffn_weight_shapes(self, width: int) -> list[tuple[int, int]]:
        """(in, out) of the FFN matrices of one expert/dense FFN of ``width``."""
        h = self.hidden_size
        if self.gated_ffn:
            return [(h, 2 * width), (width, h)]
        return [(h, width), (width, h)]

    def layer_parameters(self, moe: bool) -> dict[str, float]:
        """Parameters of one layer split into ``attention``, ``dense_ffn``, ``experts``
        (routed experts, all of them), ``shared`` (shared experts + router), ``norm``."""
        h = self.hidden_size
        attention = sum(i * o for i, o in self.attention_weight_shapes())
        out = {
            "attention": float(attention),
            "norm": 2.0 * h,
            "dense_ffn": 0.0,
            "experts": 0.0,
            "shared": 0.0,
        }
        if moe:
            expert = sum(i * o for i, o in self.ffn_weight_shapes(self.moe_intermediate_size))
            out["experts"] = float(self.num_experts * expert)
            out["shared"] = float(self.num_shared_experts * expert + h * self.num_experts)
        else:
            out["dense_ffn"] = float(
                sum(i * o for i, o in self.ffn_weight_shapes(self.intermediate_size))
            )
        return out

    def num_parameters(self) -> float:
        """Total parameters (embedding and output projection included once each unless tied)."""
        dense = sum(self.layer_parameters(False).values())
        moe = sum(self.layer_parameters(True).values()) if self.is_moe else 0.0
        embed = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        return self.num_dense_layers * dense + self.num_moe_layers * moe + embed + self.hidden_size

    def summary(self) -> dict:
        return {**dataclasses.asdict(self), "num_parameters": self.num_parameters()}


# ---------------------------------------------------------------------- parsing
def _get(config: dict, *names, default=None):
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


# config.json names read by :func:`model_from_config`; each tuple lists one field's
# aliases in the order they are looked up (the first one present wins).
CONFIG_FIELDS = (
    ("model_type",),
    ("hidden_size", "n_embd", "d_model"),
    ("num_hidden_layers", "n_layer", "num_layers"),
    ("num_attention_heads", "n_head"),
    ("num_key_value_heads",),
    ("head_dim",),
    ("hidden_act", "activation_function"),
    ("intermediate_size", "n_inner", "ffn_hidden_size"),
    ("vocab_size", "padded_vocab_size"),
    ("tie_word_embeddings",),
    ("num_local_experts", "n_routed_experts", "num_experts"),
    ("num_experts_per_tok", "moe_topk"),
    ("moe_intermediate_size",),
    ("n_shared_experts",),
    ("first_k_dense_replace",),
    ("q_lora_rank",),
    ("kv_lora_rank",),
    ("qk_nope_head_dim",),
    ("qk_rope_head_dim",),
    ("v_head_dim",),
    ("attn_implementation", "_attn_implementation"),
    ("resid_pdrop", "hidden_dropout", "hidden_dropout_prob"),
    ("attn_pdrop", "attention_dropout", "attention_probs_dropout_prob"),
    ("rope_theta", "rotary_emb_base"),
    ("sliding_window",),
    ("layer_types",),
    ("num_nextn_predict_layers",),
    ("n_group",),
    ("topk_group",),
)


def _apply_overrides(config: dict, overrides: dict) -> None:
    """Set ``overrides`` in ``config``; an override also drops the field's other aliases
    (so ``n_layer=4`` wins over a source's ``num_hidden_layers``). Unknown names raise."""
    aliases = {name: group for group in CONFIG_FIELDS for name in group}
    for key, value in overrides.items():
        if key not in aliases:
            raise SpecError(
                f"model.{key}", f"unknown or unused config.json field; known: {sorted(aliases)}"
            )
        for other in aliases[key]:
            config.pop(other, None)
        config[key] = value


def _float(config: dict, field: str, *names, default: float) -> float:
    value = _get(config, *names, default=default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not 0.0 <= number <= 1.0:
        raise SpecError(f"model.{field}", f"must be a probability in [0, 1], got {value!r}")
    return number


def _int(config: dict, field: str, *names, default=None) -> int:
    value = _get(config, *names, default=default)
    if value is None:
        raise SpecError(
            f"model.{field}", f"missing; expected one of the config fields {list(names)}"
        )
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value != int(value)
    ):
        raise SpecError(f"model.{names[0]}", f"must be an integer, got {value!r}")
    if abs(value) > 2**63 - 1:  # numpy arithmetic on it would overflow or raise
        raise SpecError(f"model.{names[0]}", f"{value!r} is outside the 64-bit integer range")
    return int(value)


def _activation(config: dict) -> str:
    """``hidden_act`` of a model whose type does not fix its FFN ('' when absent: plain);
    an unknown name is refused rather than read as a plain FFN."""
    act = _get(config, "hidden_act", "activation_function", default="")
    if not isinstance(act, str) or (
        act and act.lower() not in GATED_ACTIVATIONS | PLAIN_ACTIVATIONS
    ):
        raise SpecError(
            "model.hidden_act",
            f"unknown activation {act!r}; one of {sorted(GATED_ACTIVATIONS)} (gated FFN) "
            f"or {sorted(PLAIN_ACTIVATIONS)} (plain FFN)",
        )
    return act.lower()


def _sliding(config: dict, layers: int) -> tuple[int, int]:
    """(sliding window, layers that use it) from ``sliding_window`` and ``layer_types``
    (Hugging Face: a list of ``sliding_attention`` / ``full_attention`` per layer); a window
    without ``layer_types`` applies to every layer, ``use_sliding_window: false`` to none."""
    window = _get(config, "sliding_window", default=0) or 0
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise SpecError("model.sliding_window", f"must be an integer >= 0, got {window!r}")
    if not window or config.get("use_sliding_window") is False:
        return 0, 0
    types = config.get("layer_types")
    if types is None:
        return window, layers
    if not isinstance(types, list) or len(types) != layers:
        raise SpecError("model.layer_types", f"must be a list of {layers} layer types")
    return window, sum(1 for kind in types if kind == "sliding_attention")


def model_from_config(config: dict, name: str = "custom") -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` dict.

    Recognised names: ``hidden_size``/``n_embd``/``d_model``, ``num_hidden_layers``/
    ``n_layer``, ``num_attention_heads``/``n_head``, ``num_key_value_heads``,
    ``head_dim``, ``intermediate_size``/``n_inner``/``ffn_hidden_size`` (default 4 x hidden
    for GPT-2-style models), ``vocab_size``, ``hidden_act``, ``tie_word_embeddings``; MoE
    ``num_local_experts``/``n_routed_experts``/``num_experts``, ``num_experts_per_tok``,
    ``moe_intermediate_size`` (default ``intermediate_size``), ``n_shared_experts``,
    ``first_k_dense_replace``; MLA ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
    ``qk_rope_head_dim``, ``v_head_dim``; and ``attn_implementation``/
    ``_attn_implementation`` (``eager`` -> materialised s^2 attention, anything else flash).
    """
    if not isinstance(config, dict):
        raise SpecError(
            "model", f"expected a mapping of config.json fields, got {type(config).__name__}"
        )
    model_type = str(_get(config, "model_type", default="llama"))
    hidden = _int(config, "hidden_size", "hidden_size", "n_embd", "d_model")
    layers = _int(config, "num_hidden_layers", "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(config, "num_attention_heads", "num_attention_heads", "n_head")
    kv_heads = _int(config, "num_key_value_heads", "num_key_value_heads", default=heads)
    head_dim = _int(config, "head_dim", "head_dim", default=hidden // heads if heads else 0)
    if (
        heads > 0
        and hidden % heads
        and _get(config, "head_dim") is None
        and not _get(config, "kv_lora_rank")
    ):
        raise SpecError(
            "model.hidden_size",
            f"{hidden} is not divisible by num_attention_heads="
            f"{heads}; give head_dim explicitly for such a model",
        )
    if model_type in GATED_MODEL_TYPES:
        gated = True  # the model type fixes the FFN: hidden_act is not read
    elif model_type in PLAIN_MODEL_TYPES:
        gated = False
    else:
        gated = _activation(config) in GATED_ACTIVATIONS
    ffn = _int(
        config,
        "intermediate_size",
        "intermediate_size",
        "n_inner",
        "ffn_hidden_size",
        default=4 * hidden,
    )
    experts = _int(
        config,
        "num_local_experts",
        "num_local_experts",
        "n_routed_experts",
        "num_experts",
        default=0,
    )
    if experts < 0:
        raise SpecError("model.num_local_experts", f"must be >= 0 (0 = dense), got {experts}")
    top_k = _get(config, "num_experts_per_tok", "moe_topk")
    if experts == 0 and top_k is not None and top_k != 0:
        # a MoE config with its experts set to 0 would silently run as a dense model
        raise SpecError(
            "model.num_local_experts",
            f"is 0 (dense) but num_experts_per_tok is {top_k!r}: give the number of "
            "experts, or num_experts_per_tok 0 for a dense model",
        )
    kv_lora_rank = _int(config, "kv_lora_rank", "kv_lora_rank", default=0)
    if kv_lora_rank < 0:
        raise SpecError("model.kv_lora_rank", f"must be >= 0 (0 = no MLA), got {kv_lora_rank}")
    tied = _get(config, "tie_word_embeddings", default=model_type == "gpt2")
    if not isinstance(tied, bool):
        raise SpecError("model.tie_word_embeddings", f"must be true or false, got {tied!r}")
    attn = str(_get(config, "attn_implementation", "_attn_implementation", default="flash"))
    window, sliding = _sliding(config, layers)
    kwargs: dict[str, Any] = dict(
        name=name,
        model_type=model_type,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=ffn,
        vocab_size=_int(config, "vocab_size", "vocab_size", "padded_vocab_size"),
        gated_ffn=gated,
        tie_word_embeddings=tied,
        attention="eager" if attn == "eager" else "flash",
        hidden_dropout=_float(
            config,
            "hidden_dropout",
            "resid_pdrop",
            "hidden_dropout",
            "hidden_dropout_prob",
            default=0.1 if model_type == "gpt2" else 0.0,
        ),
        attention_dropout=_float(
            config,
            "attention_dropout",
            "attn_pdrop",
            "attention_dropout",
            "attention_probs_dropout_prob",
            default=0.1 if model_type == "gpt2" else 0.0,
        ),
        rope=model_type in ROPE_MODEL_TYPES
        or _get(config, "rope_theta", "rotary_emb_base") is not None,
        qk_norm=model_type in QK_NORM_MODEL_TYPES,
        sliding_window=window,
        sliding_layers=sliding,
        mtp_layers=_int(config, "num_nextn_predict_layers", "num_nextn_predict_layers", default=0),
    )
    if experts:
        kwargs.update(
            num_experts=experts,
            experts_per_token=_int(
                config, "num_experts_per_tok", "num_experts_per_tok", "moe_topk", default=2
            ),
            moe_intermediate_size=_int(
                config, "moe_intermediate_size", "moe_intermediate_size", default=ffn
            ),
            num_shared_experts=_int(config, "n_shared_experts", "n_shared_experts", default=0),
            first_dense_layers=_int(
                config, "first_k_dense_replace", "first_k_dense_replace", default=0
            ),
            routing_groups=_int(config, "n_group", "n_group", default=0),
            routing_group_topk=_int(config, "topk_group", "topk_group", default=0),
        )
    if kv_lora_rank:
        kwargs.update(
            q_lora_rank=_int(config, "q_lora_rank", "q_lora_rank", default=0),
            kv_lora_rank=_int(config, "kv_lora_rank", "kv_lora_rank"),
            qk_nope_head_dim=_int(config, "qk_nope_head_dim", "qk_nope_head_dim"),
            qk_rope_head_dim=_int(config, "qk_rope_head_dim", "qk_rope_head_dim"),
            v_head_dim=_int(config, "v_head_dim", "v_head_dim"),
        )
    return ModelSpec(**kwargs)


def _presets_dir():
    return resources.files("fabricflow.workload") / "presets" / "models"


def list_models() -> list[str]:
    """Names of the model presets shipped with fabricflow."""
    return sorted(p.name[:-5] for p in _presets_dir().iterdir() if p.name.endswith(".json"))


def load_model(spec, **overrides) -> ModelSpec:
    """A model from a preset name, a path to a config.json / YAML file, a dict, or a spec.

    ``overrides`` are config.json field names that replace those of the source
    (e.g. ``num_hidden_layers=4``, ``attn_implementation="eager"``).
    """
    if isinstance(spec, ModelSpec):
        if not overrides:
            return spec
        config, name = _spec_to_config(spec), spec.name
    elif isinstance(spec, dict):
        config, name = dict(spec), str(spec.get("name", "custom"))
    elif isinstance(spec, (str, Path)):
        config, name = _read_source(str(spec))
    else:
        raise SpecError(
            "model", f"expected a preset name, a path or a dict, got {type(spec).__name__}"
        )
    _apply_overrides(config, overrides)
    return model_from_config(config, name=name)


def _read_source(text: str) -> tuple[dict, str]:
    preset = _presets_dir() / f"{text}.json"
    if is_file(preset, "model"):
        return read_structured(preset, what="model", syntax="json"), text
    path = Path(text)
    if is_file(path, "model"):
        syntax = "yaml" if path.suffix in (".yaml", ".yml") else "json"
        data = read_structured(path, what="model", syntax=syntax)
        return data, path.stem if path.stem != "config" else path.parent.name or "config"
    raise SpecError(
        "model",
        f"unknown model {text!r}: not a preset ({', '.join(list_models())}) "
        "and not an existing config.json/YAML path",
        value=text,
        allowed=list_models(),
    )


def _spec_to_config(spec: ModelSpec) -> dict:
    config = {
        "model_type": spec.model_type,
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.intermediate_size,
        "vocab_size": spec.vocab_size,
        "hidden_act": "silu" if spec.gated_ffn else "gelu",
        "tie_word_embeddings": spec.tie_word_embeddings,
        "attn_implementation": spec.attention,
        "hidden_dropout": spec.hidden_dropout,
        "attention_dropout": spec.attention_dropout,
        "num_nextn_predict_layers": spec.mtp_layers,
    }
    if spec.rope and spec.model_type not in ROPE_MODEL_TYPES:
        config["rope_theta"] = 10000.0
    if spec.sliding_window:
        config["sliding_window"] = spec.sliding_window
        config["layer_types"] = ["sliding_attention"] * spec.sliding_layers + ["full_attention"] * (
            spec.num_layers - spec.sliding_layers
        )
    if spec.is_moe:
        config.update(
            num_local_experts=spec.num_experts,
            num_experts_per_tok=spec.experts_per_token,
            moe_intermediate_size=spec.moe_intermediate_size,
            n_shared_experts=spec.num_shared_experts,
            first_k_dense_replace=spec.first_dense_layers,
            n_group=spec.routing_groups,
            topk_group=spec.routing_group_topk,
        )
    if spec.is_mla:
        config.update(
            q_lora_rank=spec.q_lora_rank,
            kv_lora_rank=spec.kv_lora_rank,
            qk_nope_head_dim=spec.qk_nope_head_dim,
            qk_rope_head_dim=spec.qk_rope_head_dim,
            v_head_dim=spec.v_head_dim,
        )
    return config
