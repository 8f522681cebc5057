//! Numbers and names for people: thousands separators, fixed decimals,
//! times in µs/ms/s chosen by size, powers of ten for the very large or
//! small (never `1e-30` for a value that is 0), axis labels (ticks and
//! decades), and friendly names for GPU adapters and for why the CPU runs.

/// 18900.4 → "18,900"; below 10, one decimal.
pub fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    if x.abs() < 10.0 {
        return format!("{x:.1}");
    }
    group(&format!("{:.0}", x))
}

/// Commas between groups of three digits of an integer's text.
fn group(digits: &str) -> String {
    let (sign, digits) = digits.strip_prefix('-').map_or(("", digits), |d| ("-", d));
    let mut out = String::from(sign);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A whole count: 15457 → "15,457".
pub fn count(n: u64) -> String {
    group(&n.to_string())
}

const SUPERSCRIPT: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];

/// `mantissa × 10ⁿ` with a superscript exponent.
fn power_of_ten(x: f64, digits: usize) -> String {
    let exponent = x.abs().log10().floor() as i32;
    let mut mantissa = x / 10f64.powi(exponent);
    let mut exponent = exponent;
    // 9.996 rounds to "10.00": carry into the exponent.
    if format!("{:.*}", digits, mantissa.abs()).starts_with("10") {
        mantissa /= 10.0;
        exponent += 1;
    }
    format!("{mantissa:.digits$} × {}", power(exponent))
}

/// `10ⁿ` with a superscript exponent: -3 → "10⁻³".
pub fn power(exponent: i32) -> String {
    let sign = if exponent < 0 { "⁻" } else { "" };
    let digits: String =
        exponent.unsigned_abs().to_string().chars().map(|c| SUPERSCRIPT[c as usize - '0' as usize]).collect();
    format!("10{sign}{digits}")
}

/// Decimals that tell apart values `step` apart: 0.05 → 2, 0.25 → 2,
/// 20 → 0.
pub fn decimals_for(step: f64) -> usize {
    if !(step.is_finite() && step > 0.0) {
        return 0;
    }
    // The fewest decimals at which `step` prints exactly: a whole number
    // of units of the last decimal, up to rounding.
    (0..=12)
        .find(|&d| {
            let scaled = step * 10f64.powi(d as i32);
            scaled.round() >= 1.0 && (scaled.round() - scaled).abs() < 1e-6 * scaled
        })
        .unwrap_or(12)
}

/// A tick label on a linear axis whose ticks are `step` apart: the
/// decimals the step needs, thousands separators, and 0 as "0" (never
/// "-0.00" or "1e-17" for a sum that is 0 up to rounding).
pub fn tick(x: f64, step: f64) -> String {
    if !x.is_finite() {
        return value(x, 0);
    }
    if x.abs() < step.abs() * 1e-6 {
        return "0".into();
    }
    let text = format!("{x:.*}", decimals_for(step));
    match text.split_once('.') {
        Some((whole, fraction)) => format!("{}.{fraction}", group(whole)),
        None => group(&text),
    }
}

/// A decade on a log axis: plainly from 0.001 to 100,000 ("0.01", "1",
/// "10,000"), else as a power of ten ("10⁻⁶").
pub fn decade(exponent: i32) -> String {
    match exponent {
        -3..=-1 => format!("{:.*}", exponent.unsigned_abs() as usize, 10f64.powi(exponent)),
        0..=5 => count(10u64.pow(exponent as u32)),
        _ => power(exponent),
    }
}

/// `x` with `digits` significant digits, plainly from 0.0001 to 10,000
/// (0.001234 → "0.00123", 12.345 → "12.3"), thousands separators above,
/// a power of ten beyond a million or below 0.0001, and 0 as "0".
pub fn significant(x: f64, digits: usize) -> String {
    if !x.is_finite() || x == 0.0 {
        return value(x, 0);
    }
    let magnitude = x.abs().log10().floor() as i32;
    if !(-4..6).contains(&magnitude) {
        return power_of_ten(x, digits.saturating_sub(1));
    }
    if magnitude >= 4 {
        return thousands(x);
    }
    let decimals = (digits as i32 - 1 - magnitude).max(0) as usize;
    format!("{x:.decimals$}")
}

/// A measured value (a loss, a norm, a learning rate) with `decimals`
/// fixed decimals while that reads well, else as a power of ten: 0.09321
/// → "0.0932" (decimals 4), 1.28e30 → "1.28 × 10³⁰", 3e-7 → "3.00 × 10⁻⁷",
/// 0 → "0".
pub fn value(x: f64, decimals: usize) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "∞".into() } else { "−∞".into() };
    }
    if x == 0.0 {
        return "0".into();
    }
    if x.abs() >= 1e6 || x.abs() < 1e-3 {
        return power_of_ten(x, 2);
    }
    if x.abs() >= 1e4 {
        return thousands(x);
    }
    format!("{x:.decimals$}")
}

/// A large count in words' units: 19584 → "19,584", 4.2e7 → "42.0 M",
/// 3.1e9 → "3.10 G".
pub fn big(x: f64) -> String {
    match x.abs() {
        a if !a.is_finite() => value(x, 0),
        a if a >= 1e9 => format!("{:.2} G", x / 1e9),
        a if a >= 1e6 => format!("{:.1} M", x / 1e6),
        _ => count(x.round().max(0.0) as u64),
    }
}

/// A duration in the unit its size asks for: 0.00034 ms → "0.34 µs",
/// 0.5 → "500 µs", 12.345 → "12.3 ms", 2345 → "2.35 s".
pub fn duration_ms(ms: f64) -> String {
    if !ms.is_finite() {
        return "–".into();
    }
    match ms.abs() {
        0.0 => "0 ms".into(),
        a if a < 0.01 => format!("{:.2} µs", ms * 1e3),
        a if a < 1.0 => format!("{:.0} µs", ms * 1e3),
        a if a < 10.0 => format!("{ms:.2} ms"),
        a if a < 1000.0 => format!("{ms:.1} ms"),
        _ => format!("{:.2} s", ms / 1e3),
    }
}

/// Bytes in B, KiB, MiB or GiB.
pub fn bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let x = n as f64;
    match n {
        n if n >= 1 << 30 => format!("{:.2} GiB", x / (KIB * KIB * KIB)),
        n if n >= 1 << 20 => format!("{:.2} MiB", x / (KIB * KIB)),
        n if n >= 1 << 10 => format!("{:.1} KiB", x / KIB),
        n => format!("{n} B"),
    }
}

/// The adapter's name for a person, from the browser's description
/// ("SwiftShader Device (Subzero), swiftshader, google, software" →
/// "SwiftShader (software)").
pub fn friendly_adapter(details: &str) -> String {
    let lower = details.to_lowercase();
    let software = ["software", "swiftshader", "llvmpipe", "lavapipe", "warp"].iter().any(|s| lower.contains(s));
    let known = [
        ("swiftshader", "SwiftShader"),
        ("llvmpipe", "llvmpipe"),
        ("lavapipe", "lavapipe"),
        ("nvidia", "NVIDIA"),
        ("apple", "Apple"),
        ("intel", "Intel"),
        ("amd", "AMD"),
        ("radeon", "AMD Radeon"),
        ("qualcomm", "Qualcomm"),
        ("adreno", "Qualcomm Adreno"),
        ("mali", "Arm Mali"),
    ];
    let parts: Vec<&str> = details.split(',').map(str::trim).filter(|p| !p.is_empty() && *p != "software").collect();
    let description = parts.first().map(|d| d.split(" (").next().unwrap_or(d).trim()).unwrap_or("");
    let name = match known.iter().find(|(key, _)| lower.contains(key)) {
        // A description that names the GPU says more than the vendor.
        Some((key, name)) if !description.to_lowercase().contains(key) || description.is_empty() => name.to_string(),
        Some((_, name)) if *name == "SwiftShader" => name.to_string(),
        // A description that is only the vendor's key ("nvidia").
        Some((key, name)) if description.to_lowercase() == *key => name.to_string(),
        _ if !description.is_empty() => description.to_string(),
        _ => "an unnamed adapter".to_string(),
    };
    if software {
        format!("{name} (software)")
    } else {
        name
    }
}

/// One sentence saying why training runs on the CPU; the raw reason goes
/// behind a disclosure.
pub fn fallback_summary(reason: &str) -> String {
    let lower = reason.to_lowercase();
    if lower.contains("pinned") {
        "The CPU engine was pinned (?engine=cpu); training on the CPU.".into()
    } else if lower.contains("transformer") {
        "This transformer trains on the CPU engine: a setting of it has no WebGPU kernel yet.".into()
    } else if lower.contains("measuring") {
        "Measuring the GPU engine failed; training on the CPU.".into()
    } else if lower.contains("adapter") || lower.contains("navigator.gpu") || lower.contains("not compiled in") {
        "This browser has no WebGPU adapter; training on the CPU.".into()
    } else {
        "WebGPU could not start here; training on the CPU.".into()
    }
}

/// The exact value, for tests and the tooltip ("0.6931472").
pub fn exact(v: Option<f32>) -> String {
    v.map_or(String::new(), |v| format!("{v:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(thousands(18900.4), "18,900");
        assert_eq!(thousands(3.25), "3.2");
        assert_eq!(count(15457), "15,457");
        assert_eq!(count(999), "999");
        assert_eq!(value(0.093214, 4), "0.0932");
        assert_eq!(value(1.278_447_667_838_935e30, 4), "1.28 × 10³⁰");
        assert_eq!(value(3e-7, 4), "3.00 × 10⁻⁷");
        assert_eq!(value(9.9996e6, 4), "1.00 × 10⁷");
        assert_eq!(value(0.0, 4), "0");
        assert_eq!(value(12345.6, 4), "12,346");
        assert_eq!(value(f64::NAN, 4), "NaN");
        assert_eq!(value(-0.5, 2), "-0.50");
    }

    #[test]
    fn axis_labels_read_plainly() {
        assert_eq!(power(-3), "10⁻³");
        assert_eq!(power(12), "10¹²");
        assert_eq!(decimals_for(0.05), 2);
        assert_eq!(decimals_for(0.25), 2);
        assert_eq!(decimals_for(2e-4), 4);
        assert_eq!(decimals_for(500.0), 0);
        assert_eq!(decimals_for(1e-9), 9);
        assert_eq!(tick(0.15000000000000002, 0.05), "0.15");
        assert_eq!(tick(-1e-17, 0.1), "0");
        assert_eq!(tick(12000.0, 2000.0), "12,000");
        assert_eq!(tick(-2500.5, 0.5), "-2,500.5");
        assert_eq!(decade(-2), "0.01");
        assert_eq!(decade(0), "1");
        assert_eq!(decade(4), "10,000");
        assert_eq!(decade(-6), "10⁻⁶");
        assert_eq!(decade(7), "10⁷");
        assert_eq!(significant(0.0012345, 3), "0.00123");
        assert_eq!(significant(12.345, 3), "12.3");
        assert_eq!(significant(123456.0, 3), "123,456");
        assert_eq!(significant(3e-7, 3), "3.00 × 10⁻⁷");
        assert_eq!(significant(0.0, 3), "0");
        assert_eq!(big(19584.0), "19,584");
        assert_eq!(big(4.2e7), "42.0 M");
        assert_eq!(big(3.1e9), "3.10 G");
    }

    #[test]
    fn durations_pick_their_unit() {
        assert_eq!(duration_ms(0.0), "0 ms");
        assert_eq!(duration_ms(0.000_34), "0.34 µs");
        assert_eq!(duration_ms(0.5), "500 µs");
        assert_eq!(duration_ms(1.234), "1.23 ms");
        assert_eq!(duration_ms(12.345), "12.3 ms");
        assert_eq!(duration_ms(2345.0), "2.35 s");
        assert_eq!(bytes(1348), "1.3 KiB");
        assert_eq!(bytes(190 << 20), "190.00 MiB");
    }

    #[test]
    fn adapters_and_reasons_in_one_phrase() {
        assert_eq!(
            friendly_adapter("SwiftShader Device (Subzero), swiftshader, google, software"),
            "SwiftShader (software)"
        );
        assert_eq!(friendly_adapter("NVIDIA GeForce RTX 4090, ada, nvidia"), "NVIDIA GeForce RTX 4090");
        assert_eq!(friendly_adapter("nvidia"), "NVIDIA");
        assert_eq!(friendly_adapter("llvmpipe (LLVM 15.0.6, 256 bits)"), "llvmpipe (software)");
        assert_eq!(friendly_adapter(""), "an unnamed adapter");
        assert_eq!(
            fallback_summary("no WebGPU adapter: noop support not compiled in, vulkan support not compiled in"),
            "This browser has no WebGPU adapter; training on the CPU."
        );
        assert!(fallback_summary("the CPU engine was pinned (?engine=cpu)").contains("pinned"));
    }
}
