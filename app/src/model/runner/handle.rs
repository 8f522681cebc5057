//! The runner's commands: what each does to the run (`Runner::handle`), and
//! a fresh run that keeps the page's switches (`Runner::restart`). On error
//! the current run is left as it was.

use super::*;

impl Runner {
    /// Applies a command. On error the current run is left as it was.
    pub async fn handle(&mut self, command: Command) -> Result<Option<Outcome>, Error> {
        if let Command::StepPhase = command {
            let report = self.trainer.step_phase().await;
            return report.map(|r| Some(Outcome::Phase(Box::new(r))));
        }
        if let Command::LinkMode(mode) = command {
            self.link_mode = mode;
            return Ok(None);
        }
        if let Command::GptViews(spec) = command {
            return self.set_gpt_views(spec).map(|()| None);
        }
        if let Command::MapsImage(row) = command {
            // Its maps come in this frame's report (`maps`), and the views
            // carry them from then on.
            self.maps_row = row;
            self.maps.force();
            return Ok(None);
        }
        match command {
            Command::RunPart(index, name, part) => return self.run_parts.receive(index, name, part).map(|()| None),
            Command::DropRunParts => {
                self.run_parts = Default::default();
                return Ok(None);
            }
            Command::OpenRun => {
                let files = std::mem::take(&mut self.run_parts).into_files();
                let view = crate::model::opened::OpenedView::open(&files)?;
                return Ok(Some(Outcome::Opened(Box::new(view))));
            }
            _ => {}
        }
        self.finish_partial_step().await?;
        match command {
            Command::SaveCheckpoint => {
                let state = self.state().await?;
                let bytes = save_checkpoint(&state)?;
                return Ok(Some(Outcome::Checkpoint(bytes, state.step())));
            }
            Command::RestoreCheckpoint(bytes) => {
                // Everything is checked before the current run is replaced.
                let not_loaded = |err: Error| err.context("The checkpoint was not loaded");
                let limit = stepscope_core::input::checkpoint_limit(Limits::PAGE.memory_bytes);
                stepscope_core::input::check_size(bytes.len() as u64, limit, "the file").map_err(not_loaded)?;
                let state = load_checkpoint(&bytes).map_err(not_loaded)?;
                let e = state.experiment.clone();
                let data = self.load_data(&e).map_err(not_loaded)?;
                Limits::PAGE.check(&e, Some((data.train.rows(), data.test.rows()))).map_err(not_loaded)?;
                let step = state.step();
                let kept = state.clone();
                self.trainer.replace(state, data).map_err(not_loaded)?;
                // The restored run starts its own checkpoint ring: a later
                // rollback or device-loss recovery must not resume the run
                // that was replaced.
                self.ring.borrow_mut().clear();
                remember(&self.ring, kept);
                self.last_checkpoint = step;
                self.run_id += 1;
                return Ok(Some(Outcome::Restored(Box::new(e), step)));
            }
            Command::VerifyRestore => {
                let state = self.state().await?;
                let report = verify_restore(&state, self.data(), 5)?;
                return Ok(Some(Outcome::Verified(report.summary(), report.passed())));
            }
            Command::Reset(e) => {
                if let Err(err) = self.restart_with_race(&e, self.csv.clone()).await {
                    let kept = Box::new(self.experiment().clone());
                    return Ok(Some(Outcome::Refused(format!("{err} (the run goes on as it was)"), kept)));
                }
            }
            Command::CsvBytes(name, total, part) => self.receive_csv(name, total, part),
            Command::DropCsvBytes => self.csv_upload = None,
            Command::ForgetAutosave => {
                // Moved on first: a checkpoint of the forgotten run still
                // being stored is not written after the clear.
                self.autosave_generation.set(self.autosave_generation.get() + 1);
                *self.stored_csv.borrow_mut() = None;
                checkpoints::clear_autosave()
                    .await
                    .map_err(|m| Error::Other(format!("The autosaved run could not be forgotten: {m}")))?;
            }
            Command::ReadCsv(name, bytes, base) => self.begin_csv(name, bytes, base)?,
            Command::ReadText(name, bytes, base) => return self.read_text(name, bytes, base).await,
            Command::StartRace(spec) => self.start_race(spec).await?,
            Command::EndRace => self.end_race().await,
            Command::Apply(e) => {
                // Hyperparameters in place; a different optimizer starts
                // fresh (its state and step), SGD's momentum buffer comes
                // and goes with its momentum (`Trainer::apply`).
                self.trainer.apply(&e).await?;
            }
            Command::ZeroGrad(on) => self.trainer.set_zero_grad(on),
            Command::Rollback(before) => {
                let saved = latest_before(&self.ring, before)
                    .ok_or_else(|| Error::Checkpoint(format!("no checkpoint from before step {before} is kept")))?;
                let e = saved.state.experiment.clone();
                let data = self.load_data(&e)?;
                self.trainer.replace(saved.state, data)?;
                self.last_checkpoint = saved.step;
                return Ok(Some(Outcome::RolledBack(Box::new(e), saved.step)));
            }
            Command::ExportPytorch => {
                let script = stepscope_core::export::pytorch_script(self.experiment());
                return Ok(Some(Outcome::File("stepscope_continue.py".into(), script.into_bytes())));
            }
            Command::ExportData => {
                let csv = stepscope_core::export::training_csv(&self.data().train);
                return Ok(Some(Outcome::File("stepscope-train.csv".into(), csv.into_bytes())));
            }
            Command::ActivationCheckpointing(on) => self
                .trainer
                .set_activation_checkpointing(on)
                .map_err(|err| err.context("Activation checkpointing was not switched"))?,
            Command::LogEvery(n) => self.set_steps_per_log(n),
            Command::CheckAccumulation(k) => {
                return self.check_accumulation(k).await.map(|r| Some(Outcome::Accumulation(r)));
            }
            Command::LoseDevice => match self.trainer.gpu_context() {
                Some(ctx) => ctx.device.destroy(),
                None => return Err(Error::Gpu("no GPU device is in use to lose (pin the WebGPU engine)".into())),
            },
            Command::RefuseGpuWork => match self.trainer.gpu_context() {
                Some(ctx) => {
                    let device = &ctx.device;
                    // An uncaptured validation error; the engine's next
                    // check reports it.
                    let _ = device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("test hook: a buffer past the device's limit"),
                        size: device.limits().max_buffer_size.saturating_add(4) & !3,
                        usage: wgpu::BufferUsages::STORAGE,
                        mapped_at_creation: false,
                    });
                }
                None => return Err(Error::Gpu("no GPU device is in use (pin the WebGPU engine)".into())),
            },
            Command::StepOnce
            | Command::StepPhase
            | Command::LinkMode(_)
            | Command::GptViews(_)
            | Command::MapsImage(_)
            | Command::RunPart(..)
            | Command::OpenRun
            | Command::DropRunParts => {}
        }
        Ok(None)
    }

    /// A fresh run of `e`, keeping the lesson switches.
    pub(super) fn restart(&mut self, e: &Experiment, csv: Option<CsvData>) -> Result<(), Error> {
        let mut fresh = Runner::new(e, self.trainer.gpu_context().cloned(), csv)?;
        fresh.ctx = self.ctx.clone();
        fresh.races = std::mem::take(&mut self.races);
        fresh.trainer.set_zero_grad(self.trainer.zero_grad());
        fresh
            .trainer
            .set_activation_checkpointing(self.trainer.activation_checkpointing())
            .map_err(|err| err.context("Activation checkpointing was not switched"))?;
        // Loader workers serve one run: the host sets them up again.
        fresh.loader_notice = self.loader_notice.take();
        fresh.steps_per_log = self.steps_per_log;
        fresh.set_fused_allowed(self.fused_allowed);
        fresh.yield_after_ms = self.yield_after_ms;
        fresh.link_mode = self.link_mode;
        fresh.maps_row = self.maps_row;
        fresh.checkpoint_every = self.checkpoint_every;
        fresh.gpt_views.spec = std::mem::take(&mut self.gpt_views.spec);
        fresh.run_id = self.run_id + 1;
        fresh.race_final = self.race_final.take();
        // An upload being read goes on being read.
        fresh.csv_job = self.csv_job.take();
        fresh.csv_upload = self.csv_upload.take();
        fresh.run_parts = std::mem::take(&mut self.run_parts);
        // A background checkpoint of the old run still reports when done.
        fresh.finished = self.finished.clone();
        fresh.in_flight = self.in_flight.clone();
        fresh.autosave_generation = self.autosave_generation.clone();
        *self = fresh;
        Ok(())
    }
}
