//! Finite-difference checks of every op's backward, at awkward sizes (one
//! head, an odd head size, T = 1, batches of one and three).
//!
//! Each op f is checked through J(x) = Σ g ⊙ f(x) for a fixed random g:
//! the analytic ∂J/∂x from the op's backward (fed g as ∂L/∂y) against
//! central differences (J(x + h) − J(x − h))/2h, h = 1e-2, J summed in f64
//! over f32 outputs. Rounding in f32 is about 1e-7 of J, 1e-5 after the
//! division; truncation is O(h²·f‴), about 1e-4 here. Accepted:
//! |analytic − numeric| ≤ 2e-3 + 1e-2·|numeric|.

use super::*;
use crate::model::gpt::testing::{check, dot, values};

#[test]
fn encoder_backward_matches_finite_differences() {
    let (t, c, v) = (3, 5, 4);
    let inp = [1u32, 3, 1, 0, 2, 1];
    let rows = inp.len();
    let (wte, wpe, g) = (values(v * c, 1), values(t * c, 2), values(rows * c, 3));
    let forward = |wte: &[f32], wpe: &[f32]| {
        let mut out = vec![0.0; rows * c];
        encoder_forward(&mut out, &inp, wte, wpe, t, c);
        dot(&g, &out)
    };
    let (mut dwte, mut dwpe) = (vec![0.0; v * c], vec![0.0; t * c]);
    encoder_backward(&mut dwte, &mut dwpe, &g, &inp, t, c);
    check("dwte", &wte, &dwte, |w| forward(w, &wpe));
    check("dwpe", &wpe, &dwpe, |w| forward(&wte, w));
    // Token 1 is used three times: its gradient is the sum of three rows.
    assert!(dwte[c..2 * c].iter().any(|&d| d != 0.0));
}

#[test]
fn layernorm_backward_matches_finite_differences() {
    for (rows, c) in [(1, 1), (3, 5), (4, 8)] {
        let (x, w, b, g) = (values(rows * c, 4), values(c, 5), values(c, 6), values(rows * c, 7));
        let forward = |x: &[f32], w: &[f32], b: &[f32]| {
            let (mut out, mut mean, mut rstd) = (vec![0.0; rows * c], vec![0.0; rows], vec![0.0; rows]);
            layernorm_forward(&mut out, &mut mean, &mut rstd, x, w, b, rows, c);
            (dot(&g, &out), mean, rstd)
        };
        let (_, mean, rstd) = forward(&x, &w, &b);
        let (mut dx, mut dw, mut db) = (vec![0.0; rows * c], vec![0.0; c], vec![0.0; c]);
        layernorm_backward(&mut dx, &mut dw, &mut db, &g, &x, &w, &mean, &rstd, rows, c);
        let name = format!("layernorm {rows}×{c}");
        check(&format!("{name} dx"), &x, &dx, |x| forward(x, &w, &b).0);
        check(&format!("{name} dw"), &w, &dw, |w| forward(&x, w, &b).0);
        check(&format!("{name} db"), &b, &db, |b| forward(&x, &w, b).0);
    }
}

#[test]
fn layernorm_matches_pytorch_on_a_worked_row() {
    // torch.nn.functional.layer_norm(torch.tensor([[1., 2., 4.]]), (3,))
    // = [[-1.0690, -0.2673, 1.3363]] (eps 1e-5, biased variance).
    let (mut out, mut mean, mut rstd) = (vec![0.0; 3], vec![0.0], vec![0.0]);
    layernorm_forward(&mut out, &mut mean, &mut rstd, &[1.0, 2.0, 4.0], &[1.0; 3], &[0.0; 3], 1, 3);
    for (o, want) in out.iter().zip([-1.069_042_2, -0.267_260_5, 1.336_302_7]) {
        assert!((o - want).abs() < 1e-5, "{out:?}");
    }
}

#[test]
fn matmul_backward_matches_finite_differences() {
    for (rows, c, oc, with_bias) in [(1, 1, 1, true), (3, 5, 7, true), (6, 4, 3, false)] {
        let (x, w, bias, g) = (values(rows * c, 8), values(oc * c, 9), values(oc, 10), values(rows * oc, 11));
        let forward = |x: &[f32], w: &[f32], b: &[f32]| {
            let mut out = vec![0.0; rows * oc];
            matmul_forward(&mut out, x, w, with_bias.then_some(b), rows, c, oc);
            dot(&g, &out)
        };
        let (mut dx, mut dw, mut db) = (vec![0.0; rows * c], vec![0.0; oc * c], vec![0.0; oc]);
        matmul_backward(Some(&mut dx), &mut dw, with_bias.then_some(&mut db[..]), &g, &x, &w, rows, c, oc);
        let name = format!("matmul {rows}×{c}→{oc}");
        check(&format!("{name} dx"), &x, &dx, |x| forward(x, &w, &bias));
        check(&format!("{name} dw"), &w, &dw, |w| forward(&x, w, &bias));
        if with_bias {
            check(&format!("{name} db"), &bias, &db, |b| forward(&x, &w, b));
        } else {
            assert!(db.iter().all(|&d| d == 0.0));
        }
    }
}

#[test]
fn attention_backward_matches_finite_differences() {
    // (B, T, C, H): one head; an odd head size (3); T = 1; three heads.
    for (b, t, c, h) in [(1, 4, 4, 1), (2, 3, 6, 2), (1, 1, 3, 1), (3, 2, 9, 3)] {
        let rows = b * t;
        let (x, g) = (values(rows * 3 * c, 12), values(rows * c, 13));
        let forward = |x: &[f32]| {
            let (mut out, mut att) = (vec![0.0; rows * c], vec![0.0; b * h * t * t]);
            attention_forward(&mut out, &mut att, x, b, t, c, h);
            (dot(&g, &out), att)
        };
        let (_, att) = forward(&x);
        // The probabilities of each row sum to 1, nothing above the diagonal.
        for (row, a) in att.chunks(t).enumerate() {
            let ti = row % t;
            assert!((a[..=ti].iter().sum::<f32>() - 1.0).abs() < 1e-6);
            assert!(a[ti + 1..].iter().all(|&p| p == 0.0));
        }
        let (mut dx, mut scratch) = (vec![0.0; rows * 3 * c], vec![0.0; attention_scratch(t, c / h)]);
        attention_backward(&mut dx, &mut scratch, &g, &x, &att, b, t, c, h);
        check(&format!("attention B{b} T{t} C{c} H{h}"), &x, &dx, |x| forward(x).0);
    }
}

#[test]
fn the_first_position_attends_to_itself_alone() {
    // T = 2, one head: y[0] = v[0] whatever q and k are.
    let (c, t) = (2, 2);
    let x: Vec<f32> = values(t * 3 * c, 14);
    let (mut out, mut att) = (vec![0.0; t * c], vec![0.0; t * t]);
    attention_forward(&mut out, &mut att, &x, 1, t, c, 1);
    assert_eq!(&out[..c], &x[2 * c..3 * c]);
    assert_eq!(att[..2], [1.0, 0.0]);
}

#[test]
fn gelu_is_exact_and_its_backward_matches_finite_differences() {
    // torch.nn.GELU()(torch.tensor([-2., -0.5, 0., 1., 3.]))
    // = [-0.0455, -0.1543, 0.0000, 0.8413, 2.9960] (erf, not tanh).
    let x = [-2.0f32, -0.5, 0.0, 1.0, 3.0];
    let mut y = [0.0f32; 5];
    gelu_forward(&mut y, &x);
    for (got, want) in y.iter().zip([-0.045_500_26, -0.154_268_5, 0.0, 0.841_344_8, 2.995_950_6]) {
        assert!((got - want).abs() < 2e-6, "{y:?}");
    }
    let x = values(40, 15).iter().map(|v| 4.0 * v).collect::<Vec<f32>>();
    let g = values(40, 16);
    let mut dx = vec![0.0; 40];
    gelu_backward(&mut dx, &x, &g);
    check("gelu", &x, &dx, |x| {
        let mut y = vec![0.0; x.len()];
        gelu_forward(&mut y, x);
        dot(&g, &y)
    });
}

#[test]
fn residual_backward_passes_the_gradient_to_both() {
    let (a, b, g) = (values(6, 17), values(6, 18), values(6, 19));
    let mut y = vec![0.0; 6];
    residual_forward(&mut y, &a, &b);
    assert!(y.iter().zip(a.iter().zip(&b)).all(|(y, (a, b))| *y == a + b));
    let (mut da, mut db) = (vec![1.0; 6], vec![0.0; 6]);
    residual_backward(&mut da, &mut db, &g);
    assert!(da.iter().zip(&g).all(|(d, g)| *d == 1.0 + g), "accumulates");
    assert_eq!(db, g);
}

#[test]
fn cross_entropy_with_z_loss_backward_matches_finite_differences() {
    let (rows, v) = (5, 7);
    let targets = [0u32, 6, 3, 3, 1];
    let x: Vec<f32> = values(rows * v, 20).iter().map(|v| 3.0 * v).collect();
    for z_loss in [0.0f32, 1e-2, 0.5] {
        let objective = |x: &[f32]| {
            let mut lse = vec![0.0; rows];
            let (ce, z) = cross_entropy_forward(&mut lse, x, &targets, rows, v);
            ce as f64 + z_loss as f64 * z as f64
        };
        let mut lse = vec![0.0; rows];
        let (ce, z) = cross_entropy_forward(&mut lse, &x, &targets, rows, v);
        assert!(ce > 0.0 && z > 0.0);
        let mut dx = vec![0.0; rows * v];
        cross_entropy_backward(&mut dx, &x, &lse, &targets, rows, v, z_loss, 1.0 / rows as f32);
        check(&format!("cross-entropy z={z_loss}"), &x, &dx, objective);
    }
    // torch.nn.functional.cross_entropy(torch.tensor([[1., 2., 3.]]),
    // torch.tensor([0])) = 2.4076.
    let mut lse = [0.0];
    let (ce, _) = cross_entropy_forward(&mut lse, &[1.0, 2.0, 3.0], &[0], 1, 3);
    assert!((ce - 2.407_606).abs() < 1e-5, "{ce}");
}
