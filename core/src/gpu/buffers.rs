//! Every buffer of the GPU engine, allocated once per (model, batch size).
//! Flat parameter memory as on the CPU: parameters, gradients, updates and
//! each optimizer moment are one buffer each, in `Layout`'s order.

use wgpu::util::DeviceExt;

use super::params::{TensorRange, FLAGS_INIT, STEP_STATS_STRIDE, TENSOR_STATS_STRIDE};
use crate::engine::{MemoryBytes, TrainState};
use crate::model::{LayerOp, Layout, TensorInfo};

/// Most optimizer steps recorded into one submit.
pub const MAX_STEPS_PER_SUBMIT: usize = 64;

pub struct Buffers {
    pub params: wgpu::Buffer,          // (P)
    pub grads: wgpu::Buffer,           // (P)
    pub updates: wgpu::Buffer,         // (P) last step's p_new − p_old
    pub exp_avg: wgpu::Buffer,         // (P) or 16 bytes when unused
    pub exp_avg_sq: wgpu::Buffer,      // (P) or 16 bytes when unused
    pub momentum_buffer: wgpu::Buffer, // (P) or 16 bytes when unused
    pub batch_inputs: wgpu::Buffer,    // (B, I)
    pub batch_targets: wgpu::Buffer,   // (B, T)
    pub z: Vec<wgpu::Buffer>,          // (B, O_l) per layer, or one (B, max O) when checkpointing
    pub a: Vec<wgpu::Buffer>,          // (B, O_l) per layer
    pub grad: Vec<wgpu::Buffer>,       // (B, O_l) ∂L/∂z per layer
    pub table_inputs: wgpu::Buffer,    // (N, I) the training table, uploaded once
    pub table_targets: wgpu::Buffer,   // (N, T)
    pub rows: wgpu::Buffer,            // (steps · k · B) row indices of a submit
    pub flags: wgpu::Buffer,           // (4) non-finite code, step, micro-batch
    pub stats: wgpu::Buffer,           // (steps · 4) loss sum, grad norm, clipped
    pub scalars: wgpu::Buffer,         // (steps) StepScalars
    pub tensor_table: wgpu::Buffer,    // (tensors) TensorRange
    pub tensor_norms: wgpu::Buffer,    // (tensors) per-tensor gradient norms
    pub lamb_norms: wgpu::Buffer,      // (2 · tensors) ‖p‖, ‖r‖
    pub layer_stats: wgpu::Buffer,     // (4 · layers · TENSOR_STATS_STRIDE)
    /// A conv net's ∂W partial sums (`gpu::conv::partials_floats` of its
    /// largest conv layer), or 16 bytes.
    pub conv_partials: wgpu::Buffer,
    /// (4) what backward's recomputation of z writes as its flags: never
    /// read, so the recomputation cannot report a non-finite value
    /// (forward already reported any, from the same bits).
    pub recompute_flags: wgpu::Buffer,
    /// Activation checkpointing: `z` is one shared scratch and backward
    /// recomputes each layer's z (see `Plan`).
    pub checkpointing: bool,
    /// A transformer's activations and backward buffers (`gpu::gpt`); the
    /// per-layer `z`, `a` and `grad` above are then empty.
    pub gpt: Option<super::gpt_buffers::GptBuffers>,
    /// I, the width of a row's inputs (a transformer's: T token ids).
    pub input_width: usize,
    /// Bytes of each kind, for the memory view.
    pub bytes: MemoryBytes,
}

fn storage(device: &wgpu::Device, label: &str, bytes: u64) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        // Zero-sized bindings are invalid; unused buffers get 16 bytes.
        size: bytes.max(16).next_multiple_of(4),
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

fn storage_init(device: &wgpu::Device, label: &str, contents: &[u8]) -> wgpu::Buffer {
    if contents.is_empty() {
        return storage(device, label, 16);
    }
    device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some(label),
        contents,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
    })
}

impl Buffers {
    pub fn new(
        device: &wgpu::Device,
        state: &TrainState,
        layout: &Layout,
        tensors: &[TensorInfo],
        table: &crate::data::Table,
        max_rows_per_submit: usize,
    ) -> Buffers {
        let e = &state.experiment;
        let batch = e.batch_size as u64;
        let p_bytes = 4 * layout.parameter_count as u64;
        let f32s = |v: &[f32]| bytemuck::cast_slice::<f32, u8>(v).to_vec();
        let moment = |label: &str, values: &Vec<f32>| storage_init(device, label, &f32s(values));
        let per_layer = |label: &str| -> Vec<wgpu::Buffer> {
            layout
                .layers
                .iter()
                .enumerate()
                .map(|(l, shape)| storage(device, &format!("{label} layer {l}"), 4 * batch * shape.units as u64))
                .collect()
        };
        let table_rows: Vec<TensorRange> = tensors.iter().map(TensorRange::of).collect();
        let partials = 4 * layout
            .layers
            .iter()
            .map(|l| if let LayerOp::Conv(c) = l.op { super::conv::partials_floats(e.batch_size, &c) } else { 0 })
            .max()
            .unwrap_or(0) as u64;
        let scratch_bytes: u64 = layout.layers.iter().map(|l| 4 * batch * l.units as u64).sum::<u64>() + partials;
        let gpt =
            layout.gpt.as_ref().map(|shape| super::gpt_buffers::GptBuffers::new(device, shape, e.batch_size, false));
        let mut buffers = Buffers {
            params: storage_init(device, "params", &f32s(&state.params)),
            grads: storage(device, "grads", p_bytes),
            updates: storage(device, "updates", p_bytes),
            exp_avg: moment("exp_avg", &state.optimizer.exp_avg),
            exp_avg_sq: moment("exp_avg_sq", &state.optimizer.exp_avg_sq),
            momentum_buffer: moment("momentum_buffer", &state.optimizer.momentum_buffer),
            batch_inputs: storage(device, "batch inputs", 4 * batch * table.input_width as u64),
            batch_targets: storage(device, "batch targets", 4 * batch * table.target_width as u64),
            z: z_buffers(device, layout, batch, false),
            a: per_layer("a"),
            grad: per_layer("grad"),
            table_inputs: storage_init(device, "table inputs", &f32s(&table.inputs)),
            table_targets: storage_init(device, "table targets", &f32s(&table.targets)),
            rows: storage(device, "rows", 4 * max_rows_per_submit as u64),
            flags: storage_init(device, "flags", bytemuck::cast_slice(&FLAGS_INIT)),
            stats: storage(device, "step stats", 4 * (STEP_STATS_STRIDE * MAX_STEPS_PER_SUBMIT) as u64),
            scalars: storage(device, "step scalars", 32 * MAX_STEPS_PER_SUBMIT as u64),
            tensor_table: storage_init(device, "tensor table", bytemuck::cast_slice(&table_rows)),
            tensor_norms: storage(device, "tensor norms", 4 * tensors.len() as u64),
            lamb_norms: storage(device, "lamb norms", 8 * tensors.len() as u64),
            layer_stats: storage(device, "layer stats", 4 * (4 * layout.layers.len() * TENSOR_STATS_STRIDE) as u64),
            conv_partials: storage(device, "conv weight-gradient partials", partials),
            recompute_flags: storage_init(device, "recompute flags", bytemuck::cast_slice(&FLAGS_INIT)),
            checkpointing: false,
            gpt: None,
            input_width: table.input_width,
            bytes: MemoryBytes {
                params: p_bytes,
                grads: p_bytes,
                optimizer: 4
                    * (state.optimizer.exp_avg.len()
                        + state.optimizer.exp_avg_sq.len()
                        + state.optimizer.momentum_buffer.len()) as u64,
                activations: activation_bytes(layout, batch, false),
                backward_scratch: scratch_bytes,
                attention: 0,
            },
        };
        if let Some(g) = gpt {
            (buffers.bytes.activations, buffers.bytes.attention, buffers.bytes.backward_scratch) = g.bytes;
            buffers.gpt = Some(g);
        }
        buffers
    }

    /// Switches activation checkpointing: replaces the z buffers (the
    /// old ones are freed once the GPU is done with them) and the memory
    /// figure. The plan must be rebuilt after, since it binds them.
    pub fn set_checkpointing(&mut self, device: &wgpu::Device, layout: &Layout, batch: usize, on: bool) {
        if let Some(shape) = &layout.gpt {
            // A transformer's blocks share one block's buffers (`gpu::gpt`).
            let mut g = super::gpt_buffers::GptBuffers::new(device, shape, batch, on);
            g.attention = self.gpt.as_ref().map_or(g.attention, |old| old.attention);
            (self.bytes.activations, self.bytes.attention, self.bytes.backward_scratch) = g.bytes;
            self.gpt = Some(g);
            self.checkpointing = on;
            return;
        }
        let batch = batch as u64;
        self.z = z_buffers(device, layout, batch, on);
        self.bytes.activations = activation_bytes(layout, batch, on);
        self.checkpointing = on;
    }
}

/// z per layer, (B, O_l) each; or with checkpointing one scratch of
/// (B, max O) that every layer's forward writes and backward refills.
fn z_buffers(device: &wgpu::Device, layout: &Layout, batch: u64, checkpointing: bool) -> Vec<wgpu::Buffer> {
    if checkpointing {
        let max_units = layout.layers.iter().map(|l| l.units).max().unwrap_or(1) as u64;
        return vec![storage(device, "z scratch (checkpointing)", 4 * batch * max_units)];
    }
    layout
        .layers
        .iter()
        .enumerate()
        .map(|(l, shape)| storage(device, &format!("z layer {l}"), 4 * batch * shape.units as u64))
        .collect()
}

/// Bytes forward keeps for backward: a and z of every layer, 2·4·B·Σ O_l;
/// with checkpointing a of every layer and one z scratch,
/// 4·B·(Σ O_l + max O).
fn activation_bytes(layout: &Layout, batch: u64, checkpointing: bool) -> u64 {
    let units: u64 = layout.layers.iter().map(|l| l.units as u64).sum();
    let max_units = layout.layers.iter().map(|l| l.units as u64).max().unwrap_or(0);
    let z_units = if checkpointing { max_units } else { units };
    4 * batch * (units + z_units)
}
