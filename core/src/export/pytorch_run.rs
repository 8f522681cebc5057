//! How the PyTorch script runs: one process on the CPU, one GPU
//! (`--device cuda` or `mps`), or several processes under `torchrun` with
//! DistributedDataParallel; progress, checkpoints every N steps and on
//! Ctrl-C, and the command line. docs/export.md says what each way
//! guarantees.

use crate::experiment::Schedule;

/// Process set-up, the DistributedDataParallel wrapper, and the stop
/// request all processes agree on.
pub(super) const PROCESSES: &str = r#"
def start_processes(device):
    """(rank, world size, torch device). Under torchrun (which sets RANK,
    WORLD_SIZE and LOCAL_RANK) joins the process group: gloo on CPUs, nccl
    with --device cuda, each process on GPU LOCAL_RANK. Otherwise one
    process."""
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this PyTorch sees no CUDA GPU")
    if device == "mps" and not torch.backends.mps.is_available():
        raise SystemExit("--device mps: this PyTorch sees no Apple GPU")
    if "WORLD_SIZE" not in os.environ:
        return 0, 1, torch.device(device)
    if device == "mps":
        raise SystemExit("--device mps runs as one process; torchrun runs cpu (gloo) or cuda (nccl)")
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if device == "cuda":
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    return rank, world, torch.device(device, local) if device == "cuda" else torch.device("cpu")


BOARD_TAGS = {"loss": "loss/train", "grad_norm": "grad_norm/norm", "lr": "learning_rate"}


class PhaseClock:
    """Milliseconds per phase by time.perf_counter, summed over a step's
    micro-batches. On a CUDA device each phase ends with
    torch.cuda.synchronize(), so that it holds its own kernels' time: the
    only places the script synchronizes, and only there."""

    def __init__(self, device):
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.ms = {"forward_ms": 0.0, "backward_ms": 0.0, "optimizer_ms": 0.0, "communication_ms": 0.0}

    @contextlib.contextmanager
    def phase(self, name):
        start = time.perf_counter()
        with torch.profiler.record_function(name[:-len("_ms")]):  # named in a --profile trace
            yield
            self.sync()
        self.ms[name] += 1e3 * (time.perf_counter() - start)

    def done(self):
        return dict(self.ms)


class Communication:
    """The gradients' all-reduce time, from its launch in the communication
    hook to its future's completion, summed over a step's buckets."""

    def __init__(self):
        self.ms = 0.0

    def add(self, ms):
        self.ms += ms

    def take(self):
        ms, self.ms = self.ms, 0.0
        return ms


COMMUNICATION = Communication()


def sum_gradients(process_group, bucket):
    """DistributedDataParallel's communication hook: the gradients summed over
    the processes, not averaged, since each process's loss is already its
    share of the step's mean (data_loss). Its time is the step's
    communication_ms."""
    start = time.perf_counter()
    work = dist.all_reduce(bucket.buffer(), group=process_group, async_op=True)

    def finished(future):
        COMMUNICATION.add(1e3 * (time.perf_counter() - start))
        return future.value()[0]

    return work.get_future().then(finished)


def distribute(model, device, world):
    """The model as train_step drives it: wrapped in DistributedDataParallel
    under torchrun (even with one process), else itself."""
    if not dist.is_initialized():
        return model
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    ddp.register_comm_hook(None, sum_gradients)
    return ddp


class StopRequest:
    """Ctrl-C (SIGINT) or SIGTERM asks the run to stop at the next step
    boundary. All processes stop after the same step: they agree once per
    step. In one process a second Ctrl-C, a second or more after the first,
    quits at once without a checkpoint; under torchrun, which passes the
    terminal's Ctrl-C on to its workers a second time, it does not."""

    def __init__(self):
        self.requested, self.first = False, None
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self.request)

    def request(self, signum, frame):
        now = time.monotonic()
        if self.requested and signum == signal.SIGINT and now - self.first > 1.0 and not dist.is_initialized():
            raise KeyboardInterrupt
        self.requested, self.first = True, self.first or now

    def agreed(self, device):
        if not dist.is_initialized():
            return self.requested
        flag = torch.tensor([1.0 if self.requested else 0.0], device=device)
        dist.all_reduce(flag)
        return flag.item() > 0

"#;

pub(super) fn cli(schedule: &Schedule) -> String {
    let default_steps = match *schedule {
        Schedule::Constant => "100".to_string(),
        Schedule::WarmupCosine { total_steps, .. } | Schedule::WarmupLinear { total_steps, .. } => {
            format!("max(1, {total_steps} - step)")
        }
    };
    let default_steps_doc = match schedule {
        Schedule::Constant => "100",
        _ => "what the schedule has left",
    };
    format!(
        r#"
def newest_download():
    """The page downloads checkpoints as stepscope-step<N>.safetensors."""
    paths = glob.glob("stepscope-step*.safetensors")
    if not paths:
        raise SystemExit("give a checkpoint: no stepscope-step*.safetensors here")
    return max(paths, key=lambda p: int(re.sub(r"\D", "", p) or 0))



def rank_path(path, rank):
    """Rank 0's file is `path`; rank r's is `path` with .rank<r> before its
    extension (two.jsonl, two.rank1.jsonl): open them together in the page."""
    if rank == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{{stem}}.rank{{rank}}{{ext}}"


def arguments():
    parser = argparse.ArgumentParser(description="Continue a Stepscope run in PyTorch.")
    parser.add_argument("checkpoint", nargs="?", help="default: the newest stepscope-step*.safetensors here")
    parser.add_argument("--data", help="the training rows as CSV (x... inputs, y... targets)")
    parser.add_argument("--steps", type=int, help="optimizer steps to run (default: {default_steps_doc})")
    parser.add_argument("--out", help="write a Stepscope checkpoint here at the end (and with --save-every)")
    parser.add_argument("--save-every", type=int, metavar="N", help="also write --out every N steps")
    metrics_help = ("write step, loss, grad_norm, lr and each phase's ms per step here (JSON lines); under "
        "torchrun rank 0 writes FILE and rank r FILE with .rank<r> before its extension, each line with its rank")
    parser.add_argument("--metrics", metavar="FILE", help=metrics_help)
    board_help = ("also write TensorBoard events here (torch.utils.tensorboard), with the tags of "
        "`stepscope train --tensorboard`, so the run goes on on the same charts")
    parser.add_argument("--tensorboard", metavar="DIR", help=board_help)
    profile_help = ("record a torch.profiler trace of three steps (after one to wait and one to warm up) into "
        "DIR, one file per rank, for TensorBoard, Perfetto or HTA")
    parser.add_argument("--profile", metavar="DIR", help=profile_help)
    parser.add_argument("--histogram-every", type=int, metavar="N", default=100,
                        help="steps between histograms of the weights and gradients in --tensorboard (default 100)")
    parser.add_argument("--log-every", type=int, metavar="N", help="progress every N steps (default: 10 lines a run)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or mps")
    parser.add_argument("--deterministic", action="store_true",
                        help="deterministic kernels only (torch.use_deterministic_algorithms)")
    args = parser.parse_args()
    for name in ("steps", "save_every", "log_every", "histogram_every"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{{name.replace('_', '-')}} needs a whole number > 0, got {{value}}")
    if args.save_every and not args.out:
        parser.error("--save-every needs --out FILE to write the checkpoints to")
    return args


def main():
    args = arguments()
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision("highest")  # no TF32: float32 as Stepscope computes it
    rank, world, device = start_processes(args.device)
    say = print if rank == 0 else (lambda *a, **k: None)
    path = args.checkpoint or newest_download()
    model = Net().to(device)
    optimizer = make_optimizer(model)
    step, position, rng_state = load_checkpoint(path, model, optimizer)
    scheduler = make_scheduler(optimizer, step)
    count = sum(p.numel() for p in model.parameters())
    say(f"{{path}}: step {{step}}, {{count}} parameters, next lr {{scheduler.get_last_lr()[0]:.4g}}")
    if args.data is None:
        say("give --data train.csv (the training rows) to continue training")
        return 0
    inputs, targets = read_csv(args.data)
    order = RowOrder(len(inputs), position, rng_state)
    # The batches come from a DataLoader with the run's loader settings;
    # `order` keeps the data position a checkpoint stores.
    loader = step_loader(order, inputs, targets, rank, world)
    trained = distribute(model, device, world)
    steps = args.steps if args.steps is not None else {default_steps}
    log_every = args.log_every or max(1, steps // 10)
    processes = f"{{world}} processes ({{dist.get_backend()}})" if dist.is_initialized() else "1 process"
    say(f"training {{steps}} steps from step {{step}} on {{processes}}, device {{device}}")
    metrics = open(rank_path(args.metrics, rank), "w") if args.metrics else None
    board = None
    if args.tensorboard and rank == 0:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package
        board = SummaryWriter(args.tensorboard)
    profiler = None
    if args.profile:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profiler = torch.profiler.profile(
            activities=activities, schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(args.profile, worker_name=f"rank{{rank}}"))
        profiler.start()
    stop, start, done, stopped = StopRequest(), time.perf_counter(), 0, False
    try:
        for _ in range(steps):
            # The phases as `stepscope train --metrics` measures them.
            t = time.perf_counter()
            with torch.profiler.record_function("enumerate(DataLoader)#Stepscope.__next__"):
                first, batches = next(loader)
                if first != order.k:
                    raise SystemExit(f"the loader's step starts at row {{first}}, the run's at {{order.k}}")
                order.take(BATCH_SIZE * GRAD_ACCUMULATION)
                batches = [(x.to(device), y.to(device), n) for x, y, n in batches]
                if device.type == "cuda":
                    torch.cuda.synchronize()
            data_ms = 1e3 * (time.perf_counter() - t)
            stats = train_step(trained, optimizer, scheduler, batches)
            if not (math.isfinite(stats["loss"]) and math.isfinite(stats["grad_norm"])):
                raise SystemExit(f"step {{step}}: the loss or the gradient norm is not finite; no checkpoint written")
            step, done = step + 1, done + 1
            t = time.perf_counter()
            saved = bool(args.save_every and step % args.save_every == 0 and rank == 0)
            if saved:
                save_checkpoint(args.out, model, optimizer, step, order)
            record = {{"step": step - 1, **stats, "data_ms": data_ms}}
            if world > 1:
                record["rank"] = rank
            record["checkpoint_ms"] = 1e3 * (time.perf_counter() - t) if saved else 0.0
            # Logging: progress, the TensorBoard record, up to the metrics
            # line's buffered write.
            t = time.perf_counter()
            if done % log_every == 0 or done == steps:
                rate = done / (time.perf_counter() - start)
                say(f"step {{step - 1:>6}}  loss {{stats['loss']:.5f}}  grad_norm {{stats['grad_norm']:.4f}}  "
                    f"lr {{stats['lr']:.3e}}  {{rate:,.0f}} steps/s", flush=True)
            if saved:
                say(f"checkpoint of step {{step}} written to {{args.out}}", flush=True)
            if board:
                for key in ("loss", "grad_norm", "lr"):
                    board.add_scalar(BOARD_TAGS[key], record[key], step - 1)
                for key in ("data_ms", "forward_ms", "backward_ms", "optimizer_ms", "communication_ms",
                            "checkpoint_ms"):
                    board.add_scalar(f"phase/{{key}}", record[key], step - 1)
                board.add_scalar("speed/steps_per_second", done / (time.perf_counter() - start), step - 1)
                if step % args.histogram_every == 0 or done == steps:
                    for name, p in model.named_parameters():
                        board.add_histogram(f"weights/{{name}}", p.detach().cpu(), step - 1)
                        if p.grad is not None:
                            board.add_histogram(f"gradients/{{name}}", p.grad.detach().cpu(), step - 1)
                board.flush()
            record["logging_ms"] = 1e3 * (time.perf_counter() - t)
            record["timing"] = "cuda_synchronized" if device.type == "cuda" else "cpu"
            if metrics:
                metrics.write(json.dumps(record) + "\n")
                metrics.flush()
            if profiler:
                profiler.step()
            if stop.agreed(device):
                stopped = True
                break
    finally:
        if metrics:
            metrics.close()
        if board:
            board.close()
        if profiler:
            profiler.stop()
    seconds = time.perf_counter() - start
    say(f"{{done}} steps in {{seconds:.2f}} s ({{done / max(seconds, 1e-9):,.0f}} steps/s) on {{processes}}, "
        f"device {{device}}; last loss {{stats['loss']:.5f}}" if done else "no steps run")
    out = args.out or (f"stepscope-step{{step}}.safetensors" if stopped else None)
    if out and rank == 0 and not (args.save_every and step % args.save_every == 0 and out == args.out):
        save_checkpoint(out, model, optimizer, step, order)
        say(f"checkpoint of step {{step}} written to {{out}}")
    if dist.is_initialized():
        # The DistributedDataParallel wrapper holds the process group: free
        # it first, so that destroying the group joins gloo's threads while
        # Python still runs. Left to the interpreter's exit, a gloo thread
        # can free the last collectives (which hold Python state) after
        # finalization has begun, and the process aborts ("terminate called
        # without an active exception", about one run in ten under a profile).
        del trained
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
    if stopped:
        say(f"stopped by a signal after step {{step - 1}}; continue with: stepscope train --init {{out}}")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
"#
    )
}
