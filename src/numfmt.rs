//! Numbers for people: figures whose magnitude varies by orders (errors, tolerances) keep
//! their significant digits instead of rounding to `0.000000`.

/// A latency in µs as the progress lines and `log` show it: one decimal from 1000 µs up,
/// two below (`12.35`, `218.40`, `54812.6`), so a figure keeps four or more digits.
pub fn latency_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

/// `x` with four significant digits: fixed-point for magnitudes in `[1e-3, 1e4)`
/// (`0.001234`, `0.5000`, `1234`), scientific outside it (`2.980e-7`, `1.235e5`); `0` for
/// zero, `inf` and `NaN` as Rust writes them.
///
/// A fixed number of decimals loses a float32 rounding error (about 3e-7) entirely: a
/// verification with a small but real error read `0.000000`.
pub fn significant(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs();
    if !(1e-3..1e4).contains(&magnitude) {
        return format!("{x:.3e}");
    }
    // digits after the point that leave four significant ones: 3 − ⌊log10 |x|⌋
    let decimals = (3 - magnitude.log10().floor() as i32).max(0) as usize;
    format!("{x:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each expected string is written out by hand from the value: four significant
    /// digits, scientific below 1e-3 and from 1e4 up.
    #[test]
    fn small_and_large_magnitudes_keep_their_significant_digits() {
        let cases = [
            // the float32 rounding error that printed as 0.000000
            (2.98e-7, "2.980e-7"),
            (-3e-9, "-3.000e-9"),
            (0.000_999_9, "9.999e-4"),
            (0.001_234, "0.001234"),
            (0.5, "0.5000"),
            (12.3, "12.30"),
            (1234.0, "1234"),
            (23_456.0, "2.346e4"),
            (0.0, "0"),
            (f64::INFINITY, "inf"),
            (f64::NAN, "NaN"),
        ];
        for (x, expected) in cases {
            assert_eq!(significant(x), expected, "{x:e}");
        }
    }
}
