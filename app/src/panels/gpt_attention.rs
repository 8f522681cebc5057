//! Inside attention, on the page: every head's probabilities over one
//! validation window as a map per block and head, and per head and block
//! over steps the attention entropy, the largest attention logit, the
//! residual stream's norm and the logits' logsumexp.

use leptos::html::Canvas;
use leptos::prelude::*;
use wasm_bindgen::Clamped;
use web_sys::ImageData;

use super::chart::{LineChart, Series};
use super::draw::{context, resize};
use crate::model::views::gpt::{AttentionView, GptViewSpec};
use crate::state::{AppState, Charts};

/// One head's attention map, drawn from the view's probabilities.
#[component]
fn AttentionMap(block: usize, head: usize) -> impl IntoView {
    let charts = expect_context::<Charts>();
    let canvas: NodeRef<Canvas> = NodeRef::new();
    let hover = RwSignal::new(String::new());
    let view_of = move || charts.snapshot.get().and_then(|s| s.gpt.as_ref()?.attention.clone());
    Effect::new(move |_| {
        let (Some(a), Some(c)) = (view_of(), canvas.get()) else { return };
        paint_map(&c, &a, block, head);
    });
    let on_move = move |ev: leptos::ev::MouseEvent| {
        let (Some(a), Some(c)) = (view_of(), canvas.get()) else { return };
        let t = a.shown_t;
        let (w, h) = (c.client_width().max(1) as f64, c.client_height().max(1) as f64);
        let j = ((ev.offset_x() as f64 / w) * t as f64) as usize;
        let i = ((ev.offset_y() as f64 / h) * t as f64) as usize;
        if i >= t || j >= t {
            return;
        }
        let p = a.maps.get(block).and_then(|m| m.get((head * t + i) * t + j)).copied().unwrap_or(0.0);
        let ch = |k: usize| a.text.get(k).map_or("?".into(), |c| format!("{c:?}"));
        hover.set(if j > i {
            format!("query {} at {i} cannot see key {} at {j} (the causal mask)", ch(i), ch(j))
        } else {
            format!("query {} at {i} → key {} at {j}: weight {p:.3}", ch(i), ch(j))
        });
    };
    view! {
        <figure class="attention-head">
            <canvas node_ref=canvas data-testid="attention-map" data-block=block.to_string() data-head=head.to_string()
                role="img" aria-label=format!("Attention of block {} head {}: queries down, keys across", block + 1, head + 1)
                on:mousemove=on_move></canvas>
            <figcaption>{format!("block {} · head {}", block + 1, head + 1)}</figcaption>
            <p class="note hover" data-testid="attention-hover">{move || hover.get()}</p>
        </figure>
    }
}

/// Paints block `block`, head `head` of `a`: queries down, keys across,
/// darker for more weight (√p, so that weak links still show).
fn paint_map(canvas: &web_sys::HtmlCanvasElement, a: &AttentionView, block: usize, head: usize) {
    let Some(ctx) = context(canvas) else { return };
    let t = a.shown_t;
    let Some(map) = a.maps.get(block).and_then(|m| m.get(head * t * t..(head + 1) * t * t)) else { return };
    resize(canvas, t as u32, t as u32);
    let mut rgba = Vec::with_capacity(t * t * 4);
    for (k, &p) in map.iter().enumerate() {
        let (i, j) = (k / t, k % t);
        if j > i {
            rgba.extend([240, 240, 240, 255]);
            continue;
        }
        let v = p.clamp(0.0, 1.0).sqrt();
        let shade = |base: f32| (255.0 - v * (255.0 - base)) as u8;
        rgba.extend([shade(30.0), shade(64.0), shade(175.0), 255]);
    }
    if let Ok(image) = ImageData::new_with_u8_clamped_array_and_sh(Clamped(&rgba), t as u32, t as u32) {
        let _ = ctx.put_image_data(&image, 0.0, 0.0);
    }
}

/// Inside attention: the maps of one validation window, and the window
/// statistics over steps.
#[component]
pub fn AttentionPanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let charts = expect_context::<Charts>();
    let spec = state.run.gpt_spec;
    let shape = move || state.run.experiment.get().gpt().map(|g| (g.blocks, g.heads));
    let attention = move || charts.snapshot.get().and_then(|s| s.gpt.as_ref()?.attention.clone());
    let on_window = move |ev: leptos::ev::Event| {
        let text = event_target_value(&ev);
        match text.trim().parse::<usize>() {
            Ok(w) => state.send_gpt_spec(GptViewSpec { window: w, ..spec.get_untracked() }),
            Err(_) => {
                state.run.alert.set(Some(format!("Attention window: `{}` is not a whole number ≥ 0.", text.trim())))
            }
        }
    };
    let window_text = move || {
        attention().map_or(String::new(), |a| {
            let shown: String = a.text.iter().take(a.shown_t).collect();
            let cropped = if a.shown_t < a.text.len() {
                format!(" (its first {} of {} positions shown)", a.shown_t, a.text.len())
            } else {
                String::new()
            };
            format!("Window {} of {}{cropped}: {shown:?}", a.window, a.windows)
        })
    };
    let maps = move || {
        let (blocks, heads) = shape()?;
        let shown = heads.min(crate::model::views::gpt::SHOWN_HEADS);
        Some(
            (0..blocks)
                .map(|b| {
                    view! {
                        <div class="attention-block">
                            {(0..shown).map(|h| view! { <AttentionMap block=b head=h/> }).collect_view()}
                            {(heads > shown).then(|| view! { <span class="note">{format!("+{} more heads", heads - shown)}</span> })}
                        </div>
                    }
                })
                .collect_view(),
        )
    };
    let per_head = move |pick: fn(&crate::state::GptPoint) -> &Vec<Vec<f32>>| {
        Signal::derive(move || {
            charts.gpt_history.with(|h| {
                let Some(last) = h.last() else { return Vec::new() };
                let mut series = Vec::new();
                for (b, heads) in pick(last).iter().enumerate() {
                    for hd in 0..heads.len() {
                        let points =
                            h.iter().filter_map(|p| Some((p.step, *pick(p).get(b)?.get(hd)? as f64))).collect();
                        series.push(Series::new(format!("b{}.h{}", b + 1, hd + 1), format!("s{}", b % 5), points));
                    }
                }
                series
            })
        })
    };
    let residual = Signal::derive(move || {
        charts.gpt_history.with(|h| {
            let blocks = h.last().map_or(0, |p| p.residual_norm.len());
            (0..blocks)
                .map(|b| {
                    let points = h.iter().filter_map(|p| Some((p.step, *p.residual_norm.get(b)? as f64))).collect();
                    Series::new(format!("block {}", b + 1), format!("s{}", b % 5), points)
                })
                .collect::<Vec<_>>()
        })
    });
    let ratios = Signal::derive(move || {
        charts.gpt_history.with(|h| {
            let Some(last) = h.last() else { return Vec::new() };
            last.update_ratios
                .iter()
                .map(|(name, _)| {
                    let points = h
                        .iter()
                        .filter_map(|p| {
                            let r = p.update_ratios.iter().find(|(n, _)| n == name)?.1;
                            (r > 0.0).then_some((p.step, r as f64))
                        })
                        .collect();
                    let short = name.trim_start_matches("transformer.").replace(".weight", "");
                    let block = short.strip_prefix("h.").and_then(|r| r.split('.').next()?.parse::<usize>().ok());
                    Series::new(short, format!("s{}", block.map_or(5, |b| b % 5)), points)
                })
                .collect::<Vec<_>>()
        })
    });
    let lse = Signal::derive(move || {
        charts
            .gpt_history
            .with(|h| vec![Series::new("logsumexp", "s0", h.iter().map(|p| (p.step, p.lse as f64)).collect())])
    });
    view! {
        <div class="attention">
            <h3>"Inside attention"</h3>
            <label class="field">
                <span>"Validation window"</span>
                <input type="text" inputmode="numeric" size="6" data-testid="attention-window" aria-label="Attention window"
                    prop:value=move || spec.get().window.to_string() on:change=on_window/>
            </label>
            <p class="note" data-testid="attention-window-text">{window_text}</p>
            <div class="attention-maps">{maps}</div>
            <p class="note">"Each map: queries down, keys across, darker for more weight (√p); above the diagonal the causal mask. Hover for the characters and the weight."</p>
            <div class="gpt-charts">
                <LineChart testid="attention-entropy-chart" title="Attention entropy per head (nats, mean over queries)" unit="nats"
                    empty="Press Train" series=per_head(|p| &p.entropy)/>
                <LineChart testid="attention-max-logit-chart" title="Largest attention logit per head" unit="logit"
                    empty="Press Train" series=per_head(|p| &p.max_logit)/>
                <LineChart testid="residual-norm-chart" title="Residual stream norm after each block (mean ‖x‖)" unit="‖x‖"
                    empty="Press Train" series=residual/>
                <LineChart testid="update-ratio-chart" title="‖ΔW‖/‖W‖ per weight matrix (the dashed line: 1e-3)" unit="ratio"
                    empty="Press Train" series=ratios log=true threshold=Signal::derive(|| Some(1e-3))/>
                <LineChart testid="logits-lse-chart" title="Output logits' logsumexp (what the z-loss penalises)" unit="lse"
                    empty="Press Train" series=lse/>
            </div>
            <p class="note">"Entropy falling towards 0 and the largest logit growing come before loss spikes in large transformers (Zhai et al. 2023; Wortsman et al. 2023; Dehghani et al. 2023); q/k LayerNorm and the z-loss are the fixes they use. All from the window above."</p>
        </div>
    }
}
