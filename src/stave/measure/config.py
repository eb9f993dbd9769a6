"""A snapshot of how the training job is configured: loaders, batch, threads, precision, optimizer."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TensorInfo:
    """One tensor of a batch as the loader delivered it."""

    path: str
    dtype: str
    shape: list[int]
    device: str
    nbytes: int
    memory_format: str = "contiguous"
    pinned: bool = False


@dataclass
class LoaderInfo:
    """One ``torch.utils.data.DataLoader`` the script iterated, with what iterating it cost.

    ``first_batch_wait_ns`` holds, per iterator created (one per epoch unless workers persist),
    the wait for its first batch: the worker start-up the user pays at every epoch start.
    """

    loader_id: int
    num_workers: int
    batch_size: int | None
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    drop_last: bool
    multiprocessing_context: str | None
    dataset_type: str
    dataset_len: int | None
    sampler_type: str
    iterable_dataset: bool = False
    iterators_created: int = 0
    batches: int = 0
    first_batch_wait_ns: list[int] = field(default_factory=list)
    fork_unsafe_handles: list[str] = field(default_factory=list)
    dataset_paths: list[str] = field(default_factory=list)
    dataset_bytes_on_disk: int | None = None
    dataset_files: int | None = None
    first_indices: list[int] = field(default_factory=list)
    # Samples this rank's sampler yields per epoch (its len()), when it says; distributed runs only.
    epoch_samples: int | None = None
    # Digests of dataset[0..16), component by component ("~": drawn at random), for an in-memory
    # dataset in a distributed run: do the ranks hold the same data? (stave.dist.sample_digest)
    sample_digests: list[list[str]] = field(default_factory=list)


def training_loader(loaders: "list[LoaderInfo]") -> LoaderInfo | None:
    """The loader the training loop drew most batches from (validation loaders draw fewer)."""
    if not loaders:
        return None
    return max(loaders, key=lambda info: (info.batches, -info.loader_id))


# torch.optim optimizers with a fused implementation (fused=True, CPU and CUDA since torch 2.4).
FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")


@dataclass
class OptimizerInfo:
    """One optimizer that stepped."""

    type: str
    params: int
    param_tensors: int
    foreach: bool | None = None
    fused: bool | None = None
    steps: int = 0
    # The parameter tensors' sizes as [values, tensors] pairs, largest first (capture/config_probe.py
    # buckets them when there are many distinct sizes): what the optimizer probe rebuilds.
    param_sizes: list[list[int]] = field(default_factory=list)


# The buckets of ``ConfigSnapshot.op_s_by_phase``: a counted step's op time on a CPU, by what
# torch.autocast would change (capture/op_counter.py puts each op in one).
PRODUCT, LOW_PRECISION, FULL_PRECISION = "product", "autocast_low", "autocast_fp32"


@dataclass
class ConvShape:
    """One convolution call of the step by its own parameters (``aten.convolution`` or its backward),
    as the FLOP counter saw it: what the precision probe rebuilds and times in fp32 and bf16."""

    input_shape: list[int]
    weight_shape: list[int]
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    transposed: bool
    output_padding: list[int]
    groups: int
    # The backward call (input and weight gradients, as ``output_mask`` says) or the forward.
    backward: bool
    output_mask: list[bool]
    channels_last: bool
    flops_per_call: int
    flops_per_step: int


@dataclass
class ConfigSnapshot:
    """Settings read from the running job (no guesses: unknown is ``None``)."""

    device_type: str = "cpu"
    device_name: str = ""
    device_capability: list[int] | None = None
    device_total_memory_bytes: int | None = None
    bf16_native: bool = False
    torch_threads: int | None = None
    torch_interop_threads: int | None = None
    cores_usable: int | None = None
    cores_total: int | None = None
    loaders: list[LoaderInfo] = field(default_factory=list)
    batch: list[TensorInfo] = field(default_factory=list)
    autocast_enabled: bool | None = None
    autocast_dtype: str | None = None
    compiled: bool | None = None
    model_class: str | None = None
    model_params: int | None = None
    param_dtypes: dict[str, int] = field(default_factory=dict)
    conv_model: bool | None = None
    model_memory_format: str | None = None
    dataparallel: bool = False
    ddp: bool = False
    ddp_find_unused_parameters: bool | None = None
    cudnn_benchmark: bool | None = None
    cudnn_deterministic: bool | None = None
    deterministic_algorithms: bool | None = None
    optimizers: list[OptimizerInfo] = field(default_factory=list)
    forward_calls_per_step: float | None = None
    flops_per_step: int | None = None
    aten_ops_per_step: int | None = None
    aten_ops_by_phase: dict[str, int] = field(default_factory=dict)
    flops_by_phase: dict[str, int] = field(default_factory=dict)
    # Attention-shaped FLOPs (SDPA kernels and batched matmuls) by phase on the counted step, and
    # the SDPA kernels the dispatcher chose (name -> calls in forward): which backend ran.
    attention_flops_by_phase: dict[str, int] = field(default_factory=dict)
    # CPU runs: seconds per phase of the counted step in attention's ops (its kernels and batched
    # matmuls, and the ops on its square score matrices: mask, softmax, dropout, their gradients).
    # A CNN's activations on square images are square too: read only where the batch holds tokens.
    attention_op_s_by_phase: dict[str, float] = field(default_factory=dict)
    sdpa_kernels: dict[str, int] = field(default_factory=dict)
    # Calls of F.scaled_dot_product_attention over the run, and the first call's kernel-deciding
    # inputs (dtype, device, head_dim, attn_mask, is_causal, dropout).
    sdpa_calls: int = 0
    sdpa_inputs: dict[str, str] = field(default_factory=dict)
    # The Hugging Face model's attention implementation ("eager", "sdpa", "flash_attention_2", ...).
    attn_implementation: str | None = None
    # That model's attention layout from its config: [layers, heads, head_dim, causal (0/1)] (empty
    # when unknown); the attention probe rebuilds one call from it.
    attention_geometry: list[int] = field(default_factory=list)
    # The pad id real tokens were counted with when the batch had no attention mask, and its
    # evidence ("config.pad_token_id", "embedding.padding_idx", "loss.ignore_index", "row tails").
    pad_token_id: int | None = None
    pad_token_source: str | None = None
    # The framework whose loop called optimizer.step(): "lightning", "hf_trainer", "accelerate",
    # "timm", or None (a plain PyTorch loop); its package version and switch names (frameworks.py).
    framework: str | None = None
    framework_version: str | None = None
    framework_options: dict[str, str] = field(default_factory=dict)
    # The step's own matrix products (convolutions as their im2col GEMM) holding most of its
    # matmul FLOPs: [batch, m, n, k, flops_per_step] each; the batch-scaling and thread probes time
    # these shapes. ``matmul_shapes``: the same of the plain matrix products alone (mm, addmm, bmm),
    # ``conv_shapes`` the convolutions by their own parameters: the precision probe times these two.
    gemm_shapes: list[list[int]] = field(default_factory=list)
    matmul_shapes: list[list[int]] = field(default_factory=list)
    conv_shapes: list[ConvShape] = field(default_factory=list)
    # The dtype most matrix-product FLOPs ran in ("float32", "bfloat16" under autocast, ...): the
    # probes time the step's shapes in it.
    gemm_dtype: str | None = None
    # CPU runs: seconds inside ops on the counted step, per phase and bucket: "product" (matrix
    # products and convolutions), "autocast_low" (ops whose inputs would all be bf16 under autocast),
    # "autocast_fp32" (the rest); capture/op_counter.py says how an op is put in one.
    op_s_by_phase: dict[str, dict[str, float]] = field(default_factory=dict)
    # CPU runs: seconds and calls per phase of the counted step's ops that run on one thread whatever
    # the intra-op pool (random-number kernels such as dropout's mask, ops under ATen's parallel grain).
    serial_op_s_by_phase: dict[str, float] = field(default_factory=dict)
    serial_ops_by_phase: dict[str, int] = field(default_factory=dict)
    # CPU runs: calls per phase of the counted step's ops, products excluded, that touch a tensor of at
    # least ATen's grain (32768 elements). ``None``: not counted (a GPU run, or a record from before).
    large_ops_by_phase: dict[str, int] | None = None
    # torch.compile (only when the script imported dynamo): frames compiled and seconds compiling,
    # in all and during the counted steps (after warm-up), and the first guard-failure reasons.
    compile_frames: int | None = None
    # torch.compile's ``dynamic`` argument for the model, when the module shows it (None: not given).
    compile_dynamic: bool | None = None
    compile_frames_counted: int | None = None
    compile_s_counted: float | None = None
    recompile_reasons: list[str] = field(default_factory=list)
    # Minor page faults of the process per step after warm-up (monitor/procfs.minor_faults): a step that
    # touches fresh pages for its large temporaries pays a fault and a zeroing per 4 KiB page.
    minor_faults_per_step: float | None = None
