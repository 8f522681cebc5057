//! The data: a built-in dataset (with noise, train/test split and
//! "regenerate"), or an uploaded CSV; and the input features, as tiles.

use leptos::prelude::*;
use stepscope_core::experiment::{DataSource, Feature};
use wasm_bindgen_futures::JsFuture;

use crate::model::edit::{fit_new_data, fit_output, image_shape_text, parse_number, set_image_shape};
use crate::model::runner::Command;
use crate::model::runner::CsvProgress;
use crate::state::AppState;
use stepscope_core::data::ReadProgress;
use stepscope_core::input::{check_size, MAX_CSV_BYTES, MAX_TEXT_BYTES};

/// Bytes `start..end` of `file`, or None where the browser cannot read it.
pub(super) async fn file_part(file: &web_sys::File, start: f64, end: f64) -> Option<Vec<u8>> {
    let blob = file.slice_with_f64_and_f64(start, end).ok()?;
    let buffer = JsFuture::from(blob.array_buffer()).await.ok()?;
    Some(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// An upload goes to the training loop in parts of this many bytes, one a
/// frame.
pub(super) const UPLOAD_PART_BYTES: f64 = 4.0 * 1024.0 * 1024.0;

/// Every built-in dataset, as the dataset control lists them.
fn source_label(s: DataSource) -> &'static str {
    match s {
        DataSource::Circle => "Circle",
        DataSource::Xor => "XOR",
        DataSource::Gauss => "Two Gaussians",
        DataSource::Spiral => "Spiral",
        DataSource::Spiral3 => "Spiral, 3 classes",
        DataSource::RegPlane => "Plane (regression)",
        DataSource::RegGauss => "Gaussians (regression)",
        DataSource::Digits => "Digits (8×8 images, 10 classes)",
        DataSource::Mnist => "MNIST (28×28 images, 5,000, 10 classes)",
        DataSource::Csv => "CSV",
        DataSource::Text => "Text",
        DataSource::Shakespeare => "Tiny Shakespeare",
    }
}

const FEATURES: [(Feature, &str); 7] = [
    (Feature::X1, "x₁"),
    (Feature::X2, "x₂"),
    (Feature::X1Squared, "x₁²"),
    (Feature::X2Squared, "x₂²"),
    (Feature::X1TimesX2, "x₁x₂"),
    (Feature::SinX1, "sin x₁"),
    (Feature::SinX2, "sin x₂"),
];

fn source_from(name: &str) -> Option<DataSource> {
    DataSource::BUILT_IN.into_iter().chain([DataSource::Csv]).find(|s| s.name() == name)
}

#[component]
pub fn DataPanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let e = state.run.experiment;
    let is_csv = move || e.get().data.source == DataSource::Csv;
    // The 2-D datasets have features and noise; digits and a CSV do not.
    let is_plane = move || e.get().data.source.is_plane();
    let on_image_shape = move |ev| {
        let text = event_target_value(&ev);
        state.edit(|x| set_image_shape(x, &text));
    };
    let on_source = move |ev| {
        let name = event_target_value(&ev);
        let Some(source) = source_from(&name) else {
            state.run.alert.set(Some(format!("Unknown dataset `{name}`.")));
            return;
        };
        if source == DataSource::Csv {
            state.run.alert.set(Some("Upload a CSV file to use your own data.".into()));
            return;
        }
        state.run.csv_name.set(None);
        state.edit(|x| {
            let keep = x.data.source != DataSource::Csv;
            x.data.source = source;
            if !keep {
                x.data.samples = Some(500);
                x.data.noise = Some(0.1);
                x.data.train_fraction = Some(0.5);
                x.data.features = Some(vec![Feature::X1, Feature::X2]);
            }
            if source == DataSource::Digits {
                // The image rows have no 2-D features or generated noise.
                x.data.samples = None;
                x.data.noise = None;
                x.data.features = None;
            } else if x.data.samples.is_none() {
                x.data.samples = Some(500);
                x.data.noise = Some(0.1);
                x.data.features = Some(vec![Feature::X1, Feature::X2]);
            }
            fit_new_data(x);
            Ok(())
        });
    };
    let on_noise = move |ev| {
        let text = event_target_value(&ev);
        match parse_number("Noise", &text) {
            Ok(v) => state.edit(|x| {
                x.data.noise = Some(v / 100.0);
                Ok(())
            }),
            Err(m) => state.run.alert.set(Some(m)),
        }
    };
    let on_split = move |ev| {
        let text = event_target_value(&ev);
        match parse_number("Training share", &text) {
            Ok(v) => state.edit(|x| {
                x.data.train_fraction = Some(v / 100.0);
                Ok(())
            }),
            Err(m) => state.run.alert.set(Some(m)),
        }
    };
    let regenerate = move |_| {
        state.edit(|x| {
            x.seed = x.seed.wrapping_add(1);
            Ok(())
        })
    };
    let on_upload = move |ev: web_sys::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        let Some(file) = input.files().and_then(|f| f.get(0)) else { return };
        send_upload(state, file, false);
    };
    let on_text = move |ev: web_sys::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        let Some(file) = input.files().and_then(|f| f.get(0)) else { return };
        send_upload(state, file, true);
    };

    let feature_tiles = FEATURES
        .iter()
        .map(|&(feature, label)| {
            let active = move || e.get().data.features().contains(&feature);
            let toggle = move |_| {
                state.edit(|x| {
                    let mut features = x.data.features();
                    if let Some(i) = features.iter().position(|f| *f == feature) {
                        if features.len() == 1 {
                            return Err("Keep at least one input feature.".into());
                        }
                        features.remove(i);
                    } else {
                        features.push(feature);
                        features.sort_by_key(|f| FEATURES.iter().position(|(g, _)| g == f));
                    }
                    x.data.features = Some(features);
                    fit_output(x);
                    Ok(())
                })
            };
            view! {
                <button class="tile" class:active=active aria-pressed=move || active().to_string()
                    aria-label=format!("Input feature {label}") on:click=toggle disabled=is_csv>{label}</button>
            }
        })
        .collect_view();
    let is_gpt = move || e.get().gpt().is_some();
    let on_text_source = move |ev| {
        if event_target_value(&ev) == "shakespeare" {
            state.run.csv_name.set(None);
            state.edit(|x| {
                x.data.source = DataSource::Shakespeare;
                if let Some(g) = x.model.gpt.as_mut() {
                    g.vocab_size = 65;
                }
                Ok(())
            });
        }
    };
    let preview = move || {
        let p = state.charts.snapshot.get()?.gpt.as_ref()?.preview.clone()?;
        let vocabulary: String = p.vocabulary.chars().map(|c| if c == '\n' { '⏎' } else { c }).collect();
        Some(view! {
            <div class="text-preview" data-testid="text-preview">
                <pre class="first">{p.first}"…"</pre>
                <p class="note" data-testid="text-vocabulary">{format!("{} characters in its vocabulary: {vocabulary}", p.vocabulary.chars().count())}</p>
                <p class="note" data-testid="text-windows">{format!("{} training and {} validation windows of {} characters", p.train_windows, p.val_windows, p.context)}</p>
            </div>
        })
    };
    view! {
        <section class="panel data" aria-label="Data">
            <h2>"Data"</h2>
            <Show when=is_gpt>
                <label class="field">
                    <span>"Text"</span>
                    <select data-testid="dataset" aria-label="Dataset" prop:value=move || e.get().data.source.name() on:change=on_text_source>
                        <option value="shakespeare">{source_label(DataSource::Shakespeare)}</option>
                        <option value="text" disabled=move || e.get().data.source != DataSource::Text>
                            {move || state.run.csv_name.get().filter(|_| e.get().data.source == DataSource::Text)
                                .map_or("Your text (upload below)".to_string(), |n| format!("Text: {n}"))}
                        </option>
                    </select>
                </label>
                // A file input also takes a file dropped on it.
                <label class="field upload">
                    <span>"Your text (UTF-8, a file chosen or dropped here)"</span>
                    <input type="file" accept=".txt,text/plain" data-testid="text-upload" aria-label="Upload a text file" on:change=on_text/>
                </label>
                {preview}
            </Show>
            <Show when=move || !is_gpt()>
            <label class="field">
                <span>"Dataset"</span>
                <select data-testid="dataset" aria-label="Dataset"
                    prop:value=move || e.get().data.source.name() on:change=on_source>
                    {DataSource::BUILT_IN.iter().map(|s| view! { <option value=s.name()>{source_label(*s)}</option> }).collect_view()}
                    <option value="csv" disabled=move || !is_csv()>
                        {move || state.run.csv_name.get().map_or("CSV (upload below)".to_string(), |n| format!("CSV: {n}"))}
                    </option>
                </select>
            </label>
            </Show>
            <Show when=is_plane>
                <label class="field">
                    <span class="slider-head"><span>"Noise"</span>
                        <output class="slider-value" data-testid="noise-value">{move || format!("{} %", (e.get().data.noise() * 100.0).round())}</output></span>
                    <input type="range" min="0" max="50" step="5" data-testid="noise" aria-label="Noise percent"
                        prop:value=move || (e.get().data.noise() * 100.0).round().to_string() on:change=on_noise/>
                </label>
            </Show>
            <label class="field">
                <span class="slider-head"><span>"Training share"</span>
                    <output class="slider-value" data-testid="train-share-value">{move || format!("{} %", (e.get().data.train_fraction() * 100.0).round())}</output></span>
                // A CSV may train on every row (no test set), as it
                // did before CSVs were split.
                <input type="range" min="10" max=move || if is_csv() { "100" } else { "90" } step="10" data-testid="train-share"
                    aria-label="Training share percent"
                    prop:value=move || (e.get().data.train_fraction() * 100.0).round().to_string() on:change=on_split/>
                </label>
            <Show when=move || !is_csv() && !is_gpt()>
                <button data-testid="regenerate" aria-label="Regenerate the data" on:click=regenerate>"Regenerate"</button>
            </Show>
            <label class="field upload" hidden=is_gpt>
                <span>"Your data (CSV: x1,x2,…,y)"</span>
                <input type="file" accept=".csv,text/csv" data-testid="csv-upload" aria-label="Upload a CSV file" on:change=on_upload/>
            </label>
            <Show when=move || is_csv() && !is_gpt()>
                <label class="field">
                    <span>"Image shape (C×H×W)"</span>
                    <input type="text" data-testid="csv-image-shape" placeholder="not images" aria-label="Image shape of the CSV's rows"
                        prop:value=move || image_shape_text(&e.get()) on:change=on_image_shape/>
                </label>
            </Show>
            {move || state.run.csv_reading.get().map(|r| {
                let p = r.progress;
                view! {
                    <p class="note" data-testid="csv-progress" role="status">
                        <progress max="100" value=format!("{:.0}", 100.0 * p.fraction())></progress>
                        {if r.receiving {
                            format!(" Sending `{}` to the training worker: {:.0} % ({:.1} of {:.1} MB)", r.name, 100.0 * p.fraction(), p.bytes as f64 / 1e6, p.total_bytes as f64 / 1e6)
                        } else {
                            format!(" Reading `{}`: {:.0} % ({} rows, {:.1} of {:.1} MB)", r.name, 100.0 * p.fraction(), p.rows, p.bytes as f64 / 1e6, p.total_bytes as f64 / 1e6)
                        }}
                    </p>
                }
            })}
            <Show when=is_plane>
                <h3>"Features"</h3>
            </Show>
            <div class="tiles" role="group" aria-label="Input features" hidden=move || !is_plane()>{feature_tiles}</div>
        </section>
    }
}

/// Sends an uploaded file to the training loop, a part a frame, then asks
/// for it to be read as a CSV or (`as_text`) a transformer's text.
fn send_upload(state: AppState, file: web_sys::File, as_text: bool) {
    let name = file.name();
    leptos::task::spawn_local(async move {
        // The bytes as they are, a part a frame: the engine's side
        // gathers them, checks them as text and reads them in parts
        // (`runner::csv_job`), so that a large file never holds up
        // this thread (copied and sent whole, a 100 MB file took this
        // thread 200 ms).
        let total = file.size();
        // The core's limit, on the Blob's size before a byte is read (and
        // again on the bytes, in the worker).
        let limit = if as_text { MAX_TEXT_BYTES as u64 } else { MAX_CSV_BYTES };
        if let Err(e) = check_size(total as u64, limit, "the file") {
            state.run.alert.set(Some(e.context(format!("`{name}` was not loaded")).to_string()));
            return;
        }
        state.run.alert.set(None);
        state.run.csv_reading.set(Some(CsvProgress {
            name: name.clone(),
            receiving: true,
            progress: ReadProgress { total_bytes: total as u64, ..ReadProgress::default() },
        }));
        let mut start = 0.0;
        loop {
            let end = (start + UPLOAD_PART_BYTES).min(total);
            let Some(bytes) = file_part(&file, start, end).await else {
                state.command(Command::DropCsvBytes);
                state.run.csv_reading.set(None);
                state.run.alert.set(Some(format!("Could not read `{name}`.")));
                return;
            };
            if end >= total {
                // Nothing changes unless the whole file is good.
                let e = state.run.experiment.get_untracked();
                state.command(if as_text {
                    Command::ReadText(name, bytes, e)
                } else {
                    Command::ReadCsv(name, bytes, e)
                });
                return;
            }
            state.command(Command::CsvBytes(name.clone(), total as u64, bytes));
            // One part a frame: the next waits until the loop took it.
            while state.commands_pending() {
                crate::model::runner::next_frame().await;
            }
            start = end;
        }
    });
}
