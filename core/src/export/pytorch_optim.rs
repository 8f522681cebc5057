//! The optimizer, learning-rate schedule and checkpoint loading of the
//! PyTorch script: torch's own optimizers where they exist, LAMB and the
//! schedule written out as Stepscope computes them, and the optimizer state
//! named as the checkpoint stores it.

use super::py;
use crate::experiment::{OptimizerSpec, Schedule};
use crate::optim::OptimizerState;

pub(super) fn optimizer(spec: &OptimizerSpec, decay_groups: bool) -> String {
    let text = optimizer_over(spec);
    if !decay_groups {
        return text;
    }
    format!(
        r#"
def decay_groups(model):
    """nanoGPT's weight-decay groups (core/src/optim/mod.rs): tensors of two
    or more dimensions (linear weights, both embeddings) decay; biases and
    LayerNorm parameters are a group with weight_decay 0."""
    params = list(model.parameters())
    return [{{"params": [p for p in params if p.dim() >= 2]}},
            {{"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}}]

{}"#,
        text.replace("model.parameters(), lr=", "decay_groups(model), lr=").trim_start_matches('\n')
    )
}

fn optimizer_over(spec: &OptimizerSpec) -> String {
    let single_tensor = "foreach=False selects the single-tensor code path that\n    core/src/optim/";
    match *spec {
        OptimizerSpec::Sgd { lr, momentum, dampening, nesterov, weight_decay } => format!(
            r#"
def make_optimizer(model):
    """torch.optim.SGD; {single_tensor}sgd.rs follows op by op."""
    return torch.optim.SGD(
        model.parameters(), lr={lr}, momentum={momentum}, dampening={dampening},
        nesterov={nesterov}, weight_decay={weight_decay}, foreach=False)

"#,
            lr = py(lr),
            momentum = py(momentum),
            dampening = py(dampening),
            nesterov = if nesterov { "True" } else { "False" },
            weight_decay = py(weight_decay),
        ),
        OptimizerSpec::Adam { lr, betas, eps, weight_decay }
        | OptimizerSpec::Adamw { lr, betas, eps, weight_decay } => {
            let class = if matches!(spec, OptimizerSpec::Adam { .. }) { "Adam" } else { "AdamW" };
            format!(
                r#"
def make_optimizer(model):
    """torch.optim.{class}; {single_tensor}adam.rs follows op by op."""
    return torch.optim.{class}(
        model.parameters(), lr={lr}, betas=({b1}, {b2}), eps={eps},
        weight_decay={weight_decay}, foreach=False)

"#,
                lr = py(lr),
                b1 = py(betas[0]),
                b2 = py(betas[1]),
                eps = py(eps),
                weight_decay = py(weight_decay),
            )
        }
        OptimizerSpec::Lamb { lr, betas, eps, weight_decay } => format!(
            "{LAMB}
def make_optimizer(model):
    return Lamb(model.parameters(), lr={lr}, betas=({b1}, {b2}), eps={eps}, weight_decay={weight_decay})

",
            lr = py(lr),
            b1 = py(betas[0]),
            b2 = py(betas[1]),
            eps = py(eps),
            weight_decay = py(weight_decay),
        ),
    }
}

/// torch has no LAMB; this is core/src/optim/lamb.rs line for line, each
/// tensor operation rounded where Stepscope's f32 loop rounds.
const LAMB: &str = r#"
class Lamb(torch.optim.Optimizer):
    """LAMB as optax.lamb (You et al., 2019, https://arxiv.org/abs/1904.00962),
    op by op as core/src/optim/lamb.rs, since torch has no built-in LAMB.
    Per tensor, at 1-based step t:
        m <- (1 - b1) g + b1 m,  v <- (1 - b2) g^2 + b2 v
        r = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay p
        p <- p - lr (|p| / |r|) r,  the trust ratio |p| / |r| being 1 where
    either norm is 0. State names follow torch's Adam: step, exp_avg, exp_avg_sq."""

    def __init__(self, params, lr, betas, eps, weight_decay):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            (b1, b2), eps, wd, lr = group["betas"], group["eps"], group["weight_decay"], group["lr"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state.update(step=torch.tensor(0.0), exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                t = state["step"].item()
                m, v, g = state["exp_avg"], state["exp_avg_sq"], p.grad
                m.copy_((1 - b1) * g + b1 * m)
                v.copy_((1 - b2) * (g * g) + b2 * v)
                r = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps) + wd * p
                p_norm, r_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(r)
                ratio = p_norm / r_norm if p_norm > 0 and r_norm > 0 else 1.0
                p.add_(-lr * (r * ratio))

"#;

pub(super) fn schedule(schedule: &Schedule) -> String {
    let body = match *schedule {
        Schedule::Constant => "    \"\"\"constant (core/src/optim/schedule.rs).\"\"\"\n    return LR\n".to_string(),
        Schedule::WarmupCosine { warmup_steps, total_steps, min_lr }
        | Schedule::WarmupLinear { warmup_steps, total_steps, min_lr } => {
            let (name, decay, factor) = match schedule {
                Schedule::WarmupCosine { .. } => {
                    ("warmup_cosine", "cosine", "0.5 * (1.0 + math.cos(math.pi * progress))")
                }
                _ => ("warmup_linear", "linear", "1.0 - progress"),
            };
            format!(
                r#"    """{name} (core/src/optim/schedule.rs): LR * (t + 1) / W during the W
    warmup steps, then {decay} from LR to min_lr over the T - W steps after."""
    warmup, total, min_lr = {warmup_steps}, {total_steps}, {min_lr}
    if t < warmup:
        return LR * (t + 1) / warmup
    progress = min(max((t - warmup) / max(1, total - warmup), 0.0), 1.0)
    return min_lr + (LR - min_lr) * ({factor})
"#,
                min_lr = py(min_lr),
            )
        }
    };
    format!(
        r#"
def learning_rate(t):
{body}

class Schedule(torch.optim.lr_scheduler.LRScheduler):
    """Sets the lr of 0-based optimizer step t to learning_rate(t), computed as
    Stepscope computes it. (LambdaLR would multiply LR by a factor: one more
    rounding, and no way to reach min_lr > 0 from LR = 0.)"""

    def get_lr(self):
        return [learning_rate(self.last_epoch) for _ in self.optimizer.param_groups]


def make_scheduler(optimizer, step):
    """The schedule positioned so that the next optimizer step uses the lr of
    0-based step `step` (the checkpoint's step count)."""
    for group in optimizer.param_groups:
        group["initial_lr"] = LR
    return Schedule(optimizer, last_epoch=step - 1)

"#
    )
}

/// The optimizer state a checkpoint stores, as torch's state of one
/// parameter `p` named `name` (docs/checkpoint.md), and why skipping it at
/// step 0 changes nothing.
fn state_entry(spec: &OptimizerSpec) -> Option<(&'static str, &'static str)> {
    if spec.state_copies() == 0 {
        return None;
    }
    match spec {
        OptimizerSpec::Sgd { .. } => Some((
            "its first step sets the momentum buffer to the gradient, as Stepscope's does",
            r#"{
                "momentum_buffer": tensors[f"optimizer.{name}.momentum_buffer"].to(p.device),
            }"#,
        )),
        _ => Some((
            "it starts from zero moments, as Stepscope does",
            r#"{
                "step": torch.tensor(float(step)),
                "exp_avg": tensors[f"optimizer.{name}.exp_avg"].to(p.device),
                "exp_avg_sq": tensors[f"optimizer.{name}.exp_avg_sq"].to(p.device),
            }"#,
        )),
    }
}

/// `tied`: the transformer's head option (None for the MLP), whose
/// checkpoint holds every non-optimizer tensor of the model and, when
/// tied, the head as `transformer.wte.weight` alone.
pub(super) fn checkpoint(spec: &OptimizerSpec, tied: Option<bool>) -> String {
    let (load_params, vocabulary) = match tied {
        None => (
            "    model.load_state_dict({name: t for name, t in tensors.items() if name.startswith(\"layers.\")})\n".to_string(),
            "",
        ),
        Some(tied) => (
            format!(
                "    state = {{name: t for name, t in tensors.items() if not name.startswith(\"optimizer.\")}}\n{}    \
                 model.load_state_dict(state)  # strict: every tensor of the model, and no other\n    \
                 global VOCABULARY\n    VOCABULARY = meta.get(\"vocabulary\")\n",
                if tied { "    state[\"lm_head.weight\"] = state[\"transformer.wte.weight\"]  # the tied head\n" } else { "" }
            ),
            "    if VOCABULARY is not None:\n        metadata[\"vocabulary\"] = VOCABULARY  # the text's characters, digested after the rest\n",
        ),
    };
    let vocab_global =
        if tied.is_some() { "\nVOCABULARY = None  # a text run's characters, from the checkpoint loaded" } else { "" };
    let load_state = match state_entry(spec) {
        None => "    # Plain SGD (momentum 0) keeps no optimizer state.\n".to_string(),
        Some((why, entry)) => format!(
            r#"    # A step-0 checkpoint holds zeros, which torch need not be given:
    # {why}.
    if step > 0:
        for name, p in model.named_parameters():
            optimizer.state[p] = {entry}
"#
        ),
    };
    // A Python tuple of the buffer names: (), ("a",) or ("a", "b").
    let names: Vec<String> = OptimizerState::new(spec, 1).buffers().iter().map(|(s, _)| format!("\"{s}\"")).collect();
    let buffers = match names.len() {
        1 => format!("{},", names[0]),
        _ => names.join(", "),
    };
    format!(
        r#"
def load_checkpoint(path, model, optimizer):
    """Loads a Stepscope checkpoint (docs/checkpoint.md) into the model and the
    optimizer, on the model's device. Returns the step count, the data
    position and the shuffle RNG state for the row order."""
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {{}}
        tensors = {{name: f.get_tensor(name) for name in f.keys()}}
    if meta.get("format") not in FORMATS_READ:
        raise SystemExit(f"{{path}} is not a Stepscope checkpoint ({{' or '.join(FORMATS_READ)}})")
    if json.loads(meta["experiment"]) != EXPERIMENT:
        raise SystemExit(f"{{path}} holds another experiment than the one this script was generated for")
{load_params}    step = int(meta["step"])
{load_state}    rng_state = [int(word, 16) for word in meta["rng_state"].split(":")]
    return step, json.loads(meta["data_position"]), rng_state


OPTIMIZER_BUFFERS = ({buffers})  # what the checkpoint keeps per parameter{vocab_global}


def checkpoint_tensors(model, optimizer):
    """The parameters and the optimizer state as a checkpoint names them,
    float32 on the CPU. A buffer torch has not created yet (no step taken)
    is stored as zeros, as Stepscope stores a fresh run's."""
    tensors = {{}}
    for name, p in model.named_parameters():
        tensors[name] = p.detach()
        state = optimizer.state.get(p, {{}})
        for buffer in OPTIMIZER_BUFFERS:
            held, key = state.get(buffer), f"optimizer.{{name}}.{{buffer}}"
            tensors[key] = torch.zeros_like(p) if held is None else held.detach()
    return {{name: t.to("cpu", torch.float32).contiguous() for name, t in tensors.items()}}


def digest(tensors, metadata):
    """sha256 over the tensors in name order, each as its name, a 0 byte, its
    shape as u64 little-endian and its float32 little-endian bytes, then over
    the metadata entries in order, each as the key's and the value's byte
    lengths (u64 little-endian) and bytes (core/src/checkpoint/mod.rs)."""
    assert sys.byteorder == "little", "checkpoints are little-endian"
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name]
        h.update(name.encode() + b"\0")
        for size in t.shape:
            h.update(int(size).to_bytes(8, "little"))
        h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    for key, value in metadata.items():
        for part in (key.encode(), value.encode()):
            h.update(len(part).to_bytes(8, "little") + part)
    return "sha256:" + h.hexdigest()


def write_atomic(path, data):
    """Writes a new file beside `path`, flushes it to disk and renames it over
    `path`, so a reader sees the old file or the new one, never a torn one."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=f".{{os.path.basename(path)}}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # directories cannot be opened on Windows
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def save_checkpoint(path, model, optimizer, step, order):
    """Writes a Stepscope checkpoint of the run (docs/checkpoint.md):
    parameters, optimizer state, step, data position, RNG and digest.
    `stepscope train --init` and the page's restore continue from it."""
    tensors = checkpoint_tensors(model, optimizer)
    position, rng_state = order.position()
    metadata = {{  # in the order the digest covers them
        "format": FORMAT,
        "experiment": EXPERIMENT_JSON,
        "step": str(step),
        "data_position": json.dumps(position, separators=(",", ":")),
        "rng_state": ":".join(f"{{word:016x}}" for word in rng_state),
    }}
{vocabulary}    metadata["digest"] = digest(tensors, metadata)
    write_atomic(path, safetensors_bytes(tensors, metadata=metadata))

"#
    )
}
