//! The data side of the PyTorch script: the training rows from CSV and the
//! order Stepscope serves them in, including its shuffle RNG.

use crate::engine::MAX_SHUFFLE_REPLAY_ROWS;
use crate::experiment::Experiment;

/// The generator of core/src/rng.rs in Python: wanted for shuffling and
/// for augmentation.
pub(super) const RNG: &str = r#"
M64 = (1 << 64) - 1


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Xoshiro256:
    """xoshiro256** (https://prng.di.unimi.it/), as core/src/rng.rs."""

    def __init__(self, state):
        self.s = list(state)

    def next_u64(self):
        s = self.s
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        """Uniform below n, by rejection (no modulo bias)."""
        zone = M64 - (M64 % n)
        while True:
            x = self.next_u64()
            if x < zone:
                return x % n

    def permutation(self, n):
        """Fisher-Yates, from the last index down."""
        perm = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.below(i + 1)
            perm[i], perm[j] = perm[j], perm[i]
        return perm


def seeded(seed, stream):
    """Rng::new of core/src/rng.rs: SplitMix64 from seed and stream seeds it."""
    sm = (seed ^ (stream * 0xD1B54A32D192ED03)) & M64
    state = []
    for _ in range(4):
        sm = (sm + 0x9E3779B97F4A7C15) & M64
        z = sm
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        state.append(z ^ (z >> 31))
    return Xoshiro256(state)

"#;

pub(super) fn row_order(shuffle: bool) -> String {
    if !shuffle {
        return r#"
class RowOrder:
    """Which training rows come next (core/src/data/batcher.rs): rows are
    numbered by a global counter k over all epochs and, without shuffling,
    row k is k mod N in file order."""

    def __init__(self, rows, position, rng_state):
        self.rows, self.k, self.epoch, self.rng_state = rows, position["rows_consumed"], position["epoch"], rng_state

    def take(self, count):
        out = [(self.k + i) % self.rows for i in range(count)]
        self.k += count
        return out

    def position(self):
        """What a checkpoint stores: the counter; the epoch and RNG pass
        through unchanged, as in Stepscope without shuffling."""
        return {"rows_consumed": self.k, "epoch": self.epoch}, self.rng_state

"#
        .to_string();
    }
    r#"
class RowOrder:
    """Which training rows come next (core/src/data/batcher.rs): rows are
    numbered by a global counter k over all epochs; epoch k // N serves them in
    the order of its own permutation, drawn from the shuffle RNG, whose state
    at the start of the checkpoint's epoch the checkpoint stores."""

    def __init__(self, rows, position, rng_state):
        self.rows, self.k, self.epoch = rows, position["rows_consumed"], position["epoch"]
        lag = self.k // rows - self.epoch
        if lag < 0 or lag * rows > MAX_REPLAY:
            where = f"epoch {self.epoch}, {self.k} rows consumed"
            raise SystemExit(f"the checkpoint's data position ({where}) does not fit {rows} training rows")
        self.rng = Xoshiro256(rng_state)
        self.epoch_rng = list(rng_state)
        self.permutation = self.rng.permutation(rows)

    def take(self, count):
        out = []
        for _ in range(count):
            while self.k // self.rows > self.epoch:
                self.epoch += 1
                self.epoch_rng = list(self.rng.s)
                self.permutation = self.rng.permutation(self.rows)
            out.append(self.permutation[self.k % self.rows])
            self.k += 1
        return out

    def position(self):
        """What a checkpoint stores: the counter, the epoch being served and
        the RNG state at its start (the epoch moves on lazily, at the first
        row past its end, as in Stepscope)."""
        return {"rows_consumed": self.k, "epoch": self.epoch}, self.epoch_rng

"#
    .replace("MAX_REPLAY", &MAX_SHUFFLE_REPLAY_ROWS.to_string())
}

pub(super) const DATA: &str = r#"
def read_csv(path):
    """The training rows: x... columns are the inputs and y... columns the
    targets, each in the order they appear (core/src/data/csv.rs). Returns
    float32 tensors (N, I) and (N, T)."""
    with open(path) as f:
        lines = [line.split(",") for line in f if line.strip()]
    header = [name.strip() for name in lines[0]]
    table = torch.tensor([[float(value) for value in line] for line in lines[1:]], dtype=torch.float32)
    inputs = [c for c, name in enumerate(header) if name.startswith("x") and len(name) > 1]
    targets = [c for c, name in enumerate(header) if name.startswith("y")]
    return table[:, inputs], table[:, targets]


def next_batches(order, inputs, targets, rank=0, world=1):
    """The next optimizer step's GRAD_ACCUMULATION micro-batches of BATCH_SIZE
    rows, as (inputs, targets, BATCH_SIZE), each image changed as the
    experiment's data.augment says (AUGMENTER; row counter k's draws). Every process draws every
    micro-batch, so all keep the same row order, and keeps its contiguous
    slice: rows [rank * B // world, (rank + 1) * B // world) of each. Slices
    differ by at most one row; with more processes than rows some are empty
    and contribute nothing but still take part in the gradient sum."""
    batches = []
    for _ in range(GRAD_ACCUMULATION):
        first = order.k
        rows = order.take(BATCH_SIZE)
        lo = rank * BATCH_SIZE // world
        mine = rows[lo:(rank + 1) * BATCH_SIZE // world]
        index = torch.tensor(mine, dtype=torch.long, device=inputs.device)
        x = inputs[index]
        if AUGMENTER is not None:
            x = AUGMENTER.batch(x, first + lo)
        batches.append((x, targets[index], BATCH_SIZE))
    return batches


class StepBatches(torch.utils.data.IterableDataset):
    """Every step's micro-batches (next_batches) from a data position, as
    Stepscope's loader workers make them (core/src/data/loader.rs): with
    NUM_WORKERS workers, step j by worker j mod NUM_WORKERS, each keeping
    the row order in step by taking the other workers' rows unmade, so the
    DataLoader, which takes from its workers in turn, yields the run's
    steps in order. Yields (the step's first row counter, its batches)."""

    def __init__(self, rows, position, rng_state, inputs, targets, rank, world):
        self.args = rows, position, rng_state
        self.inputs, self.targets, self.rank, self.world = inputs, targets, rank, world

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        me, every = (info.id, info.num_workers) if info is not None else (0, 1)
        order = RowOrder(*self.args)
        j = 0
        while True:
            if j % every == me:
                first = order.k
                yield first, next_batches(order, self.inputs, self.targets, self.rank, self.world)
            else:
                order.take(BATCH_SIZE * GRAD_ACCUMULATION)
            j += 1


def step_loader(order, inputs, targets, rank=0, world=1):
    """PyTorch's DataLoader over the run's steps from `order`'s position,
    with the experiment's loader settings (data.num_workers,
    data.prefetch_factor): batches made beside the training, not in it."""
    position, rng_state = order.position()
    steps = StepBatches(len(inputs), position, rng_state, inputs, targets, rank, world)
    workers = {"num_workers": NUM_WORKERS}
    if NUM_WORKERS > 0:
        workers["prefetch_factor"] = PREFETCH_FACTOR
    return iter(torch.utils.data.DataLoader(steps, batch_size=None, **workers))

"#;

/// The loader settings and, where the experiment augments its images, the
/// augmentation (core/src/data/augment.rs) in Python.
pub(super) fn augmentation(e: &Experiment) -> String {
    let mut s = format!(
        "NUM_WORKERS = {}  # data.num_workers: DataLoader workers (0: in the training loop)\n\
         PREFETCH_FACTOR = {}  # data.prefetch_factor: batches each worker makes ahead\n",
        e.data.num_workers(),
        e.data.prefetch_factor()
    );
    let (Some(a), Some(shape)) = (e.data.active_augment(), e.image_shape()) else {
        s += "AUGMENTER = None  # the experiment changes no image\n\n";
        return s;
    };
    let elastic = a.elastic.filter(|e| e.alpha > 0.0);
    s += &format!(
        "IMAGE = ({}, {}, {})  # channels, height, width of a row's image\n\
         SHIFT = {}  # data.augment.shift: whole pixels each way\n\
         ELASTIC = {}  # data.augment.elastic: (alpha, sigma)\n",
        shape[0],
        shape[1],
        shape[2],
        a.shift,
        elastic.map_or("None".into(), |e| format!("({}, {})", super::py(e.alpha), super::py(e.sigma))),
    );
    s += AUGMENTER;
    s
}

const AUGMENTER: &str = r#"

def gaussian_kernel(sigma):
    """The normalised Gaussian, radius int(4 sigma + 0.5) as SciPy's."""
    radius = int(4.0 * sigma + 0.5)
    weights = [math.exp(-0.5 * (i * i) / (sigma * sigma)) for i in range(-radius, radius + 1)]
    total = sum(weights)
    return [w / total for w in weights]


class Augmenter:
    """core/src/data/augment.rs: training row k's image is shifted by whole
    pixels (zero where nothing comes from) and, with ELASTIC, read bilinearly
    at places displaced by two fields of uniform noise smoothed by a
    Gaussian and scaled by alpha (Simard et al. 2003); every draw from row
    k's own generator, so any worker makes the same images. float32 with
    Stepscope's order of operations: the same bits."""

    def __init__(self, seed):
        self.seed = seed
        self.kernel = None
        if ELASTIC is not None:
            self.alpha = torch.tensor(ELASTIC[0], dtype=torch.float32)
            self.kernel = torch.tensor(gaussian_kernel(ELASTIC[1]), dtype=torch.float32)

    def batch(self, x, first):
        """Rows of `x`, row i being the run's row counter first + i."""
        rows = [self.image(x[i].cpu(), first + i) for i in range(len(x))]
        return torch.stack(rows).to(x.device) if rows else x

    def blur(self, field):
        c, h, w = IMAGE
        r = len(self.kernel) // 2
        half = torch.zeros_like(field)
        for t in range(len(self.kernel)):
            off = t - r
            lo, hi = max(0, -off), min(w, w - off)
            if lo < hi:
                half[:, lo:hi] += self.kernel[t] * field[:, lo + off:hi + off]
        out = torch.zeros_like(field)
        for t in range(len(self.kernel)):
            off = t - r
            lo, hi = max(0, -off), min(h, h - off)
            if lo < hi:
                out[lo:hi, :] += self.kernel[t] * half[lo + off:hi + off, :]
        return out

    def image(self, image, k):
        c, h, w = IMAGE
        rng = seeded(self.seed ^ ((k * 0x9E3779B97F4A7C15) & M64), 6)
        dy = dx = 0
        if SHIFT > 0:
            dy = rng.below(2 * SHIFT + 1) - SHIFT
            dx = rng.below(2 * SHIFT + 1) - SHIFT
        src = image.reshape(c, h, w)
        if self.kernel is None:
            out = torch.zeros_like(src)
            ys, yd = slice(max(-dy, 0), h - max(dy, 0)), slice(max(dy, 0), h - max(-dy, 0))
            xs, xd = slice(max(-dx, 0), w - max(dx, 0)), slice(max(dx, 0), w - max(-dx, 0))
            out[:, yd, xd] = src[:, ys, xs]
            return out.reshape(-1)
        fields = []
        for _ in range(2):
            noise = [-1.0 + 2.0 * ((rng.next_u64() >> 11) * (1.0 / (1 << 53))) for _ in range(h * w)]
            fields.append(self.blur(torch.tensor(noise, dtype=torch.float64).to(torch.float32).reshape(h, w)))
        ys = torch.arange(h).reshape(h, 1).expand(h, w)
        xs = torch.arange(w).reshape(1, w).expand(h, w)
        sy = (ys - dy).to(torch.float32) + self.alpha * fields[0]
        sx = (xs - dx).to(torch.float32) + self.alpha * fields[1]
        y0, x0 = torch.floor(sy), torch.floor(sx)
        fy, fx = sy - y0, sx - x0
        y0, x0 = y0.long(), x0.long()

        def at(yy, xx):
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            v = src[:, yy.clamp(0, h - 1), xx.clamp(0, w - 1)]
            return torch.where(inside, v, torch.zeros((), dtype=src.dtype))

        top = at(y0, x0) * (1 - fx) + at(y0, x0 + 1) * fx
        bottom = at(y0 + 1, x0) * (1 - fx) + at(y0 + 1, x0 + 1) * fx
        return (top * (1 - fy) + bottom * fy).reshape(-1)


AUGMENTER = Augmenter(EXPERIMENT["seed"])

"#;
