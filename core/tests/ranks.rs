//! Data-parallel ranks (ARCHITECTURE.md, "Ranks: the same bits on any
//! number of cores"): a sharded run gives the same bits per step on 1, 2,
//! 3 and 4 ranks, for the MLP and the transformer, with accumulation,
//! clipping, regularization and checkpointing on; it computes the same
//! function as the unsharded run (within rounding); it restores from a
//! checkpoint into the same bits; and the format refuses shards that do
//! not divide the batch.

use stepscope_core::checkpoint::{load_checkpoint, save_checkpoint};
use stepscope_core::data::{read_csv, Dataset, TokenText, MAX_VOCABULARY};
use stepscope_core::{CpuEngine, Experiment};

const TEXT: &str = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n\
The slings and arrows of outrageous fortune,\nOr to take arms against a sea of troubles\n";

fn mlp(shards: usize) -> (Experiment, Dataset) {
    let mut csv = String::from("x1,x2,y\n");
    for i in 0..120 {
        let (x1, x2) = ((i % 12) as f32 / 3.0 - 2.0, (i / 12) as f32 / 2.5 - 2.0);
        csv += &format!("{x1},{x2},{}\n", u8::from(x1 * x2 > 0.2) + u8::from(x1 > 1.0));
    }
    let e = Experiment::from_json(&format!(
        r#"{{"seed": 7, "model": {{"inputs": 2, "layers": [{{"units": 12, "activation": "tanh"}},
            {{"units": 12, "activation": "gelu_tanh"}}, {{"units": 3, "activation": "linear"}}]}},
            "loss": "cross_entropy", "optimizer": {{"kind": "adamw", "lr": 0.02, "weight_decay": 0.01}},
            "batch_size": 24, "grad_accumulation": 2, "shards": {shards}, "clip_grad_norm": 0.5,
            "regularization": {{"kind": "l2", "rate": 0.001}},
            "data": {{"source": "csv", "shuffle": true}}}}"#
    ))
    .unwrap();
    let table = read_csv(&csv).unwrap();
    let data = Dataset::load(&e, Some(&table)).unwrap();
    (e, data)
}

fn gpt(shards: usize) -> (Experiment, Dataset) {
    let vocabulary = TokenText::read(TEXT.as_bytes(), 1, MAX_VOCABULARY).unwrap().vocabulary.len();
    let e = Experiment::from_json(&format!(
        r#"{{"seed": 5, "model": {{"kind": "gpt", "vocab_size": {vocabulary}, "context": 8, "embed": 12, "heads": 2,
            "blocks": 2}}, "loss": "cross_entropy", "z_loss": 0.001,
            "optimizer": {{"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.99], "weight_decay": 0.1}},
            "batch_size": 12, "grad_accumulation": 2, "shards": {shards}, "clip_grad_norm": 1.0,
            "data": {{"source": "text", "train_fraction": 0.8}}}}"#
    ))
    .unwrap();
    let text = TokenText::read(TEXT.as_bytes(), 8, MAX_VOCABULARY).unwrap();
    let data = Dataset::load_text(&e, &text).unwrap();
    (e, data)
}

/// Each step's (loss, grad norm, z-loss) bits and a hash of the
/// parameters' bits after it.
fn trace(engine: &mut CpuEngine, steps: usize) -> Vec<(u32, u32, Option<u32>, u64)> {
    (0..steps)
        .map(|_| {
            let m = engine.step().unwrap();
            let mut hash = 0xcbf2_9ce4_8422_2325u64;
            for p in engine.params() {
                hash = (hash ^ u64::from(p.to_bits())).wrapping_mul(0x0100_0000_01b3);
            }
            (m.loss.to_bits(), m.grad_norm.to_bits(), m.z_loss.map(f32::to_bits), hash)
        })
        .collect()
}

fn same_bits_on_every_rank_count(build: fn(usize) -> (Experiment, Dataset), checkpointing: bool) {
    let (e, data) = build(6);
    let mut first = None;
    for ranks in [1, 2, 3, 4, 6, 16] {
        let mut engine = CpuEngine::new(&e, data.clone()).unwrap();
        engine.set_activation_checkpointing(checkpointing).unwrap();
        engine.set_threads(ranks);
        assert_eq!(engine.ranks_used(), ranks.min(6));
        let got = trace(&mut engine, 12);
        assert_eq!(engine.rank_times().len(), ranks.min(6));
        match &first {
            None => first = Some(got),
            Some(want) => assert_eq!(&got, want, "{ranks} ranks against 1"),
        }
    }
}

#[test]
fn the_mlp_gives_the_same_bits_on_any_number_of_ranks() {
    same_bits_on_every_rank_count(mlp, false);
    same_bits_on_every_rank_count(mlp, true);
}

#[test]
fn the_transformer_gives_the_same_bits_on_any_number_of_ranks() {
    same_bits_on_every_rank_count(gpt, false);
    same_bits_on_every_rank_count(gpt, true);
}

/// Shards change the order of the sums, not the function: the sharded
/// run's first steps stay within rounding of the unsharded run's.
#[test]
fn shards_compute_the_unsharded_gradient() {
    for build in [mlp as fn(usize) -> (Experiment, Dataset), gpt] {
        let (whole, data) = build(1);
        let (sharded, _) = build(4);
        let mut a = CpuEngine::new(&whole, data.clone()).unwrap();
        let mut b = CpuEngine::new(&sharded, data).unwrap();
        b.set_threads(2);
        for step in 0..3 {
            let (ma, mb) = (a.step().unwrap(), b.step().unwrap());
            assert!((ma.loss - mb.loss).abs() <= 1e-5 * ma.loss.abs().max(1.0), "step {step}: {ma:?} vs {mb:?}");
            let rel = (ma.grad_norm - mb.grad_norm).abs() / ma.grad_norm;
            assert!(rel <= 1e-4, "step {step}: grad norm {} vs {}", ma.grad_norm, mb.grad_norm);
            assert!(mb.phases.communication_ms >= 0.0);
            assert_eq!(ma.phases.communication_ms, 0.0, "an unsharded step has no all-reduce");
        }
        let worst = a.params().iter().zip(b.params()).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        assert!(worst <= 1e-4, "parameters {worst} apart after 3 steps");
    }
}

/// A checkpoint of a sharded run holds its shards; restored on another
/// rank count it continues with the same bits.
#[test]
fn a_sharded_run_resumes_on_other_ranks_with_the_same_bits() {
    let (e, data) = mlp(6);
    let mut straight = CpuEngine::new(&e, data.clone()).unwrap();
    let want = trace(&mut straight, 8);
    let mut first = CpuEngine::new(&e, data.clone()).unwrap();
    first.set_threads(3);
    let got_first = trace(&mut first, 4);
    assert_eq!(got_first, want[..4]);
    let bytes = save_checkpoint(&first.state()).unwrap();
    let state = load_checkpoint(&bytes).unwrap();
    assert_eq!(state.experiment.shards, 6);
    let mut resumed = CpuEngine::from_state(state, data).unwrap();
    resumed.set_threads(2);
    assert_eq!(trace(&mut resumed, 4), want[4..]);
}

#[test]
fn shards_must_divide_the_batch() {
    let json = |shards: usize| {
        format!(
            r#"{{"seed": 1, "model": {{"inputs": 2, "layers": [{{"units": 1, "activation": "linear"}}]}},
                "loss": "mse", "optimizer": {{"kind": "sgd", "lr": 0.1}}, "batch_size": 12, "shards": {shards},
                "data": {{"source": "csv"}}}}"#
        )
    };
    let err = Experiment::from_json(&json(5)).unwrap_err().to_string();
    assert!(err.contains("shards (5) must divide batch_size (12)"), "{err}");
    let err = Experiment::from_json(&json(0)).unwrap_err().to_string();
    assert!(err.contains("shards must be in 1..=64, got 0"), "{err}");
    assert_eq!(Experiment::from_json(&json(4)).unwrap().shards, 4);
    // Left out, it is 1, and an unsharded experiment's JSON does not name it.
    let one = Experiment::from_json(&json(1)).unwrap();
    assert!(!serde_json::to_string(&one).unwrap().contains("shards"));
}

/// Ranks outside the engine, as the page's rank workers are: each a
/// `ShardServer` with its own buffers, here in the same thread, answering
/// through the `RemoteRanks` seam; `fail` names remote ranks that stop
/// answering at a step.
struct InProcess {
    servers: Vec<stepscope_core::engine::ShardServer>,
    /// The started micro-batch: inputs, targets, step.
    pending: Option<(Vec<f32>, Vec<f32>, u64)>,
    params: Vec<f32>,
    fail_at: Option<(usize, u64)>,
}

impl stepscope_core::engine::RemoteRanks for InProcess {
    fn count(&self) -> usize {
        self.servers.len()
    }
    fn start(
        &mut self,
        params: &[f32],
        new_params: bool,
        inputs: &[f32],
        targets: &[f32],
        step: u64,
        _: &[(usize, usize)],
    ) {
        if new_params {
            self.params = params.to_vec();
        } else {
            assert_eq!(self.params, params, "the parameters do not change within a step");
        }
        self.pending = Some((inputs.to_vec(), targets.to_vec(), step));
    }
    fn finish(
        &mut self,
        grads: &mut [f32],
        results: &mut [stepscope_core::engine::ShardResult],
        assignment: &[(usize, usize)],
    ) -> Vec<Result<f64, String>> {
        let (inputs, targets, step) = self.pending.take().expect("started");
        let p = self.servers[0].parameter_count();
        let base = assignment[0].0;
        let mut answers = Vec::new();
        for (i, (server, &(first, end))) in self.servers.iter_mut().zip(assignment).enumerate() {
            if self.fail_at.is_some_and(|(rank, at)| rank == i && step >= at) {
                answers.push(Err(format!("rank worker {i} did not answer")));
                continue;
            }
            let g = &mut grads[(first - base) * p..(end - base) * p];
            let got = server.compute(&self.params, &inputs, &targets, first, end, step, g);
            results[first - base..end - base].copy_from_slice(&got);
            answers.push(Ok(1.0));
        }
        answers
    }
    fn drop_ranks(&mut self, dropped: &[usize]) {
        for &i in dropped.iter().rev() {
            self.servers.remove(i);
        }
        self.fail_at = None;
    }
}

fn in_process(e: &Experiment, ranks: usize, fail_at: Option<(usize, u64)>) -> Box<InProcess> {
    let servers = (0..ranks).map(|_| stepscope_core::engine::ShardServer::new(e).unwrap()).collect();
    Box::new(InProcess { servers, pending: None, params: Vec::new(), fail_at })
}

/// The page's seam: the engine and remote ranks give the bits of the engine
/// alone; a remote rank that stops is named, its shards run on, and the
/// bits do not change.
#[test]
fn remote_ranks_give_the_same_bits_and_a_failed_one_loses_nothing() {
    for build in [mlp as fn(usize) -> (Experiment, Dataset), gpt] {
        let (e, data) = build(6);
        let mut alone = CpuEngine::new(&e, data.clone()).unwrap();
        let want = trace(&mut alone, 8);
        for (remote, fail_at) in [(1, None), (2, None), (5, None), (3, Some((1, 4)))] {
            let mut engine = CpuEngine::new(&e, data.clone()).unwrap();
            engine.set_remote_ranks(Some(in_process(&e, remote, fail_at)));
            assert_eq!(engine.ranks_used(), 1 + remote);
            assert_eq!(trace(&mut engine, 8), want, "{remote} remote ranks, failing {fail_at:?}");
            match fail_at {
                Some(_) => {
                    assert_eq!(engine.ranks_used(), remote, "the failed rank is dropped");
                    let notice = engine.take_rank_notice().expect("a notice");
                    assert!(notice.contains("rank 2 stopped (rank worker 1 did not answer)"), "{notice}");
                }
                None => assert_eq!(engine.take_rank_notice(), None),
            }
        }
    }
}

/// Stepped by phase (the page's step-by-phase mode: each shard's forward
/// and backward, stage by stage) or in parts, a sharded run gives the bits
/// of its whole steps.
#[test]
fn a_sharded_run_stepped_by_phase_or_in_parts_gives_the_same_bits() {
    for build in [mlp as fn(usize) -> (Experiment, Dataset), gpt] {
        let (e, data) = build(6);
        let mut whole = CpuEngine::new(&e, data.clone()).unwrap();
        whole.set_threads(3);
        let want = trace(&mut whole, 3);
        let mut by_phase = CpuEngine::new(&e, data.clone()).unwrap();
        let mut got = Vec::new();
        let mut phases = 0;
        while got.len() < 3 {
            let report = by_phase.step_phase().unwrap();
            phases += 1;
            if let Some(m) = report.metrics {
                let mut hash = 0xcbf2_9ce4_8422_2325u64;
                for p in by_phase.params() {
                    hash = (hash ^ u64::from(p.to_bits())).wrapping_mul(0x0100_0000_01b3);
                }
                got.push((m.loss.to_bits(), m.grad_norm.to_bits(), m.z_loss.map(f32::to_bits), hash));
            }
        }
        assert_eq!(got, want, "by phase");
        // Each shard's forward and backward are phases of their own.
        assert!(phases >= 3 * (2 * 2 * 6 + 1), "{phases} phases");
        // A step begun by phase is finished whole with the same bits.
        let mut mixed = CpuEngine::new(&e, data).unwrap();
        mixed.step_phase().unwrap();
        mixed.step_phase().unwrap();
        assert_eq!(trace(&mut mixed, 3), want, "begun by phase, finished whole");
    }
}

/// The memory budget counts a sharded run's shard gradients (S × P
/// floats), and the engine holds no more than counted.
#[test]
fn the_budget_counts_the_shard_gradients() {
    use stepscope_core::limits::RunBytes;
    let (whole, data) = mlp(1);
    let (sharded, _) = mlp(6);
    let p = stepscope_core::model::Layout::new(&whole).parameter_count as u64;
    let rows = Some((data.train.rows(), data.test.rows()));
    let shard = RunBytes::of(&sharded, rows).training;
    let others = 5 * (shard.activations + shard.attention + shard.backward_scratch);
    assert_eq!(RunBytes::of(&sharded, rows).engine - RunBytes::of(&whole, rows).engine, 4 * p * 6 + others);
    assert_eq!(6 * shard.activations, RunBytes::of(&whole, rows).training.activations, "one shard's rows");
    let mut engine = CpuEngine::new(&sharded, data).unwrap();
    engine.set_threads(3);
    engine.step().unwrap();
    let held = engine.memory().peak_backward() + engine.other_bytes();
    let counted = RunBytes::of(&sharded, rows);
    let t = counted.training;
    let budget = t.params + t.grads + t.optimizer + t.activations + t.backward_scratch + counted.engine;
    assert!(held <= budget + 4096, "held {held} bytes, counted {budget}");
}
