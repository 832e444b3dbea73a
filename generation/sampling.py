"""What a run asks of the engine beyond ``max_tokens``: the sampling parameters of vLLM's ``SamplingParams``.

One frozen value, :class:`SamplingSpec`, travels from the API (``openai_api``, the native chat API) through
the run (``Run.temperature``/``Run.top_p`` columns plus ``Run.sampling``, a JSON object holding the fields
that differ from their defaults) to the worker, which hands :meth:`SamplingSpec.engine_kwargs` to vLLM.

:func:`check_sampling` checks a spec the way ``vllm.SamplingParams._verify_args`` does, so a request that vLLM
would refuse is a 400 at the API, before anything is written, and never a failed run. It imports no vLLM (the
web tier never loads torch).

``structured_outputs`` holds exactly one of vLLM's ``StructuredOutputsParams`` fields: ``json`` (a schema),
``json_object`` (true), ``regex``, ``choice`` (a list of strings) or ``grammar`` (EBNF/Lark text). Whether
the backend can compile it is checked by ``generation.structured_outputs``.

``constraint`` names a batch-level logits processor registered on the engine with its arguments,
``{"name": str, "args": {...}}``; it reaches vLLM as ``SamplingParams.extra_args["constraint"]``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_STOP_SEQUENCES = 16
MAX_TOP_LOGPROBS = 20
"""vLLM's default ``max_logprobs`` engine argument, and OpenAI's limit for ``top_logprobs``."""
STRUCTURED_OUTPUT_KINDS = ("json", "json_object", "regex", "choice", "grammar")


class SamplingError(ValueError):
    """A parameter vLLM would refuse; ``param`` names it as the request spelled it."""

    def __init__(self, message: str, *, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class SamplingSpec:
    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    """0 (or -1): no top-k."""
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    """Stop strings; the answer ends before the first one, which is not part of the text (OpenAI's rule)."""
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0
    logprobs: int | None = None
    """None: no log probabilities; n: the sampled token's plus the n most likely (0..20)."""
    logit_bias: dict[int, float] = field(default_factory=dict)
    """Token id -> bias added to its logit (-100..100)."""
    structured_outputs: dict[str, Any] | None = None
    constraint: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields that differ from their defaults, JSON-ready (``Run.sampling``); temperature and top_p are
        columns of their own and are left out."""
        default = SamplingSpec()
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("temperature", "top_p"):
                continue
            value = getattr(self, f.name)
            if value == getattr(default, f.name):
                continue
            if f.name == "logit_bias":
                value = {str(k): v for k, v in value.items()}
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], *, temperature: float, top_p: float) -> SamplingSpec:
        """The spec a run stored (:meth:`to_json`); keys this version does not know are an error."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown sampling fields: {sorted(unknown)}")
        values = dict(data)
        if "stop" in values:
            values["stop"] = tuple(values["stop"])
        if "stop_token_ids" in values:
            values["stop_token_ids"] = tuple(values["stop_token_ids"])
        if "logit_bias" in values:
            values["logit_bias"] = {int(k): float(v) for k, v in values["logit_bias"].items()}
        return cls(temperature=temperature, top_p=top_p, **values)

    def with_seed(self, seed: int | None) -> SamplingSpec:
        return replace(self, seed=seed)

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``vllm.SamplingParams`` (without ``max_tokens``, ``output_kind`` and
        ``structured_outputs``, which the engine builds from :attr:`structured_outputs` itself)."""
        kwargs: dict[str, Any] = asdict(self)
        kwargs.pop("structured_outputs")
        constraint = kwargs.pop("constraint")
        kwargs["stop"] = list(self.stop)
        kwargs["stop_token_ids"] = list(self.stop_token_ids)
        kwargs["logit_bias"] = dict(self.logit_bias) or None
        if constraint is not None:
            kwargs["extra_args"] = {"constraint": constraint}
        return kwargs


def _finite(value: float, param: str) -> None:
    if not math.isfinite(value):
        raise SamplingError(f"'{param}' must be a finite number; got {value}.", param=param)


def check_sampling(spec: SamplingSpec, *, max_tokens: int | None, names: dict[str, str] | None = None) -> None:
    """Raises :class:`SamplingError` for what ``vllm.SamplingParams`` would refuse (same bounds, same rules).

    ``names`` maps a field to the parameter name the request used (``logprobs`` -> ``top_logprobs``).
    """
    names = names or {}

    def fail(name: str, message: str) -> SamplingError:
        param = names.get(name, name)
        return SamplingError(message.replace("{p}", f"'{param}'"), param=param)

    for name in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        _finite(getattr(spec, name), names.get(name, name))
    if not 0.0 <= spec.temperature <= 2.0:
        raise fail("temperature", f"{{p}} must be in [0, 2]; got {spec.temperature}.")
    if not 0.0 < spec.top_p <= 1.0:
        raise fail("top_p", f"{{p}} must be in (0, 1]; got {spec.top_p}.")
    if spec.top_k < -1:
        raise fail("top_k", f"{{p}} must be 0 (disable), or at least 1; got {spec.top_k}.")
    if not 0.0 <= spec.min_p <= 1.0:
        raise fail("min_p", f"{{p}} must be in [0, 1]; got {spec.min_p}.")
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(spec, name)
        if not -2.0 <= value <= 2.0:
            raise fail(name, f"{{p}} must be in [-2, 2]; got {value}.")
    if spec.repetition_penalty <= 0.0:
        raise fail("repetition_penalty", f"{{p}} must be greater than zero; got {spec.repetition_penalty}.")
    if spec.seed is not None and not INT64_MIN <= spec.seed <= INT64_MAX:
        raise fail("seed", "{p} must fit in a signed 64-bit integer.")
    if spec.min_tokens < 0:
        raise fail("min_tokens", f"{{p}} must be at least 0; got {spec.min_tokens}.")
    if max_tokens is not None and spec.min_tokens > max_tokens:
        raise fail("min_tokens", f"{{p}} must be at most max_tokens={max_tokens}; got {spec.min_tokens}.")
    if len(spec.stop) > MAX_STOP_SEQUENCES:
        raise fail("stop", f"{{p}} takes at most {MAX_STOP_SEQUENCES} sequences; got {len(spec.stop)}.")
    if any(not s for s in spec.stop):
        raise fail("stop", "{p} cannot contain an empty string.")
    if any(t < 0 for t in spec.stop_token_ids):
        raise fail("stop_token_ids", "{p} must hold token ids (integers of at least 0).")
    if spec.logprobs is not None and not 0 <= spec.logprobs <= MAX_TOP_LOGPROBS:
        raise fail("logprobs", f"{{p}} must be between 0 and {MAX_TOP_LOGPROBS}; got {spec.logprobs}.")
    for token, bias in spec.logit_bias.items():
        if token < 0:
            raise fail("logit_bias", f"{{p}} keys must be token ids of at least 0; got {token}.")
        if not math.isfinite(bias) or not -100.0 <= bias <= 100.0:
            raise fail("logit_bias", f"{{p}} values must be between -100 and 100; got {bias} for token {token}.")
    so = spec.structured_outputs
    if so is not None:
        kinds = [k for k in STRUCTURED_OUTPUT_KINDS if so.get(k) not in (None, False)]
        unknown = sorted(set(so) - set(STRUCTURED_OUTPUT_KINDS))
        if unknown:
            raise fail(
                "structured_outputs", f"{{p}} does not take {unknown}; use one of {list(STRUCTURED_OUTPUT_KINDS)}."
            )
        if len(kinds) != 1:
            raise fail(
                "structured_outputs",
                f"{{p}} must set exactly one of {list(STRUCTURED_OUTPUT_KINDS)}; got {kinds or 'none'}.",
            )
