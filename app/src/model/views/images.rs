//! The views of an image dataset (digits): how each class fares on the
//! test set, which classes are taken for which (the confusion matrix),
//! the test images the model gets wrong, and the first layer's weights
//! drawn as images (what each first-layer unit looks for).

/// One test image the model gets wrong.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Misclassified {
    /// Row of the test set.
    pub row: usize,
    /// The image, (side, side), each pixel in [0, 1].
    pub pixels: Vec<f32>,
    pub truth: usize,
    pub predicted: usize,
}

/// What the page draws for an image dataset.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ImageViews {
    /// Pixels a side of an image.
    pub side: usize,
    pub classes: usize,
    /// Test-set counts, [truth][predicted], (classes, classes) row-major.
    pub confusion: Vec<u64>,
    /// The first `SHOWN_MISCLASSIFIED` test images the model gets wrong.
    pub misclassified: Vec<Misclassified>,
    /// Test images the model gets wrong, in all.
    pub wrong: u64,
    /// Per drawn first-layer unit, its weights as an image, (side, side),
    /// scaled to [-1, 1] by the largest magnitude of that unit's weights.
    /// Empty when the first layer is a conv or pool layer (`conv` draws it).
    pub first_layer: Vec<Vec<f32>>,
    /// A conv net's feature maps of one test image and its filters.
    pub conv: Option<super::ConvViews>,
}

/// Misclassified test images carried to the page, at most.
pub const SHOWN_MISCLASSIFIED: usize = 24;
/// First-layer units drawn as images, at most.
pub const SHOWN_FILTERS: usize = 16;

impl ImageViews {
    /// Test rows of class `k`, and how many of them the model gets right.
    pub fn class_counts(&self, k: usize) -> (u64, u64) {
        let row = &self.confusion[k * self.classes..(k + 1) * self.classes];
        (row.iter().sum(), row[k])
    }

    /// Share of the test set the model gets right.
    pub fn accuracy(&self) -> Option<f64> {
        let total: u64 = self.confusion.iter().sum();
        let right: u64 = (0..self.classes).map(|k| self.confusion[k * self.classes + k]).sum();
        (total > 0).then(|| right as f64 / total as f64)
    }
}

/// The first layer's weights of the first `SHOWN_FILTERS` units as
/// images: `weights` is the layer's (units, side²) block.
pub fn filters(weights: &[f32], units: usize, side: usize) -> Vec<Vec<f32>> {
    weights
        .chunks_exact(side * side)
        .take(units.min(SHOWN_FILTERS))
        .map(|w| {
            let scale = w.iter().fold(1e-12f32, |m, v| m.max(v.abs()));
            w.iter().map(|v| v / scale).collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_accuracy_read_the_confusion_matrix() {
        // 2 classes: class 0 has 3 rows, 2 right; class 1 has 2, 1 right.
        let v = ImageViews { classes: 2, confusion: vec![2, 1, 1, 1], ..ImageViews::default() };
        assert_eq!(v.class_counts(0), (3, 2));
        assert_eq!(v.class_counts(1), (2, 1));
        assert_eq!(v.accuracy(), Some(0.6));
        assert_eq!(ImageViews { classes: 2, confusion: vec![0; 4], ..ImageViews::default() }.accuracy(), None);
    }

    #[test]
    fn filters_are_each_units_weights_scaled_by_its_largest() {
        let weights = [1.0, -2.0, 0.5, 0.0, 4.0, 2.0, -1.0, 0.0];
        let f = filters(&weights, 2, 2);
        assert_eq!(f, vec![vec![0.5, -1.0, 0.25, 0.0], vec![1.0, 0.5, -0.25, 0.0]]);
        assert_eq!(filters(&weights, 1, 2).len(), 1);
    }
}
