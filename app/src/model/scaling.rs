//! The ranks' measured scaling (`scaling-readout`): the page's own
//! training rate at each number of ranks this run has used, so that a
//! learner who changes the ranks sees tokens/s (or steps/s) and the
//! efficiency per rank from the engine's numbers, not from a model.

/// Readings kept per number of ranks (the latest; about half a second
/// each, as the steps-per-second figure is taken).
const KEPT: usize = 20;
/// Readings a number of ranks needs before it is shown (the first ones
/// after a change include starting the rank workers).
const SHOWN_AFTER: usize = 4;

/// Rates measured at each number of ranks, for one run's shape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scaling {
    /// What the rates belong to (`runner::shape_key` and the shards):
    /// another shape starts over.
    key: String,
    by_ranks: Vec<(usize, Vec<f64>)>,
}

impl Scaling {
    /// One reading: `rate` (per second, in the readout's unit) on `ranks`
    /// ranks of the run `key`.
    pub fn record(&mut self, key: &str, ranks: usize, rate: f64) {
        if key != self.key {
            *self = Scaling { key: key.to_string(), by_ranks: Vec::new() };
        }
        if !(rate.is_finite() && rate > 0.0) || ranks == 0 {
            return;
        }
        let at = match self.by_ranks.iter().position(|(r, _)| *r == ranks) {
            Some(at) => at,
            None => {
                self.by_ranks.push((ranks, Vec::new()));
                self.by_ranks.sort_by_key(|(r, _)| *r);
                self.by_ranks.iter().position(|(r, _)| *r == ranks).expect("just added")
            }
        };
        let kept = &mut self.by_ranks[at].1;
        kept.push(rate);
        if kept.len() > KEPT {
            kept.remove(0);
        }
    }

    /// The median rate at each number of ranks with enough readings.
    pub fn rates(&self) -> Vec<(usize, f64)> {
        self.by_ranks
            .iter()
            .filter(|(_, v)| v.len() >= SHOWN_AFTER)
            .map(|(r, v)| {
                let mut v = v.clone();
                v.sort_by(f64::total_cmp);
                (*r, v[v.len() / 2])
            })
            .collect()
    }

    /// "Measured on this run: 1 rank 3,700 tokens/s; 2 ranks 6,200 tokens/s
    /// (1.68×, 84 % a rank)"; None before any number of ranks has enough
    /// readings.
    pub fn readout(&self, unit: &str) -> Option<String> {
        let rates = self.rates();
        let one = rates.iter().find(|(r, _)| *r == 1).map(|(_, x)| *x);
        let parts: Vec<String> = rates
            .iter()
            .map(|&(r, x)| {
                let rank = if r == 1 { "1 rank".to_string() } else { format!("{r} ranks") };
                let against = match one {
                    Some(one) if r > 1 => {
                        format!(" ({:.2}×, {:.0} % a rank)", x / one, 100.0 * x / (one * r as f64))
                    }
                    _ => String::new(),
                };
                format!("{rank} {} {unit}{against}", crate::model::words::thousands(x))
            })
            .collect();
        (!parts.is_empty()).then(|| format!("Measured on this run: {}.", parts.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_per_ranks_and_their_efficiency() {
        let mut s = Scaling::default();
        assert_eq!(s.readout("tokens/s"), None);
        for x in [100.0, 3000.0, 3100.0, 3050.0] {
            s.record("a", 1, x);
        }
        for x in [6000.0, 5000.0, 5200.0, 5100.0, f64::NAN] {
            s.record("a", 2, x);
        }
        assert_eq!(s.rates(), [(1, 3050.0), (2, 5200.0)]);
        let text = s.readout("tokens/s").unwrap();
        assert!(
            text.starts_with(
                "Measured on this run: 1 rank 3,050 tokens/s; 2 ranks 5,200 tokens/s (1.70×, 85 % a rank)"
            ),
            "{text}"
        );
        // Too few readings are not shown; another run starts over.
        s.record("a", 4, 9000.0);
        assert_eq!(s.rates().len(), 2);
        s.record("b", 1, 10.0);
        assert_eq!(s.rates(), []);
    }
}
