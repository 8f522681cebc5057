//! The data side of the PyTorch script: the training rows from CSV and the
//! order Stepscope serves them in, including its shuffle RNG.

use crate::engine::MAX_SHUFFLE_REPLAY_ROWS;

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
    rows, as (inputs, targets, BATCH_SIZE). Every process draws every
    micro-batch, so all keep the same row order, and keeps its contiguous
    slice: rows [rank * B // world, (rank + 1) * B // world) of each. Slices
    differ by at most one row; with more processes than rows some are empty
    and contribute nothing but still take part in the gradient sum."""
    batches = []
    for _ in range(GRAD_ACCUMULATION):
        rows = order.take(BATCH_SIZE)
        mine = rows[rank * BATCH_SIZE // world:(rank + 1) * BATCH_SIZE // world]
        index = torch.tensor(mine, dtype=torch.long, device=inputs.device)
        batches.append((inputs[index], targets[index], BATCH_SIZE))
    return batches

"#;
