//! A font for `progress.png`. plotters' `ab_glyph` backend needs font bytes at run time; we
//! read a system TrueType font instead of linking fontconfig, so the binary also starts on
//! GPU machines without fontconfig. Without any font the chart is drawn without text.

use std::path::Path;
use std::sync::OnceLock;

/// Well-known places of a sans-serif TrueType font on Debian, Ubuntu, Fedora and Arch.
const CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
];

fn find_font() -> Option<Vec<u8>> {
    for c in CANDIDATES {
        if let Ok(bytes) = std::fs::read(c) {
            return Some(bytes);
        }
    }
    // any .ttf one level below /usr/share/fonts/truetype
    let dir = Path::new("/usr/share/fonts/truetype");
    let entries = std::fs::read_dir(dir).ok()?;
    for sub in entries.flatten() {
        for f in std::fs::read_dir(sub.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if f.path().extension().is_some_and(|e| e == "ttf") {
                if let Ok(bytes) = std::fs::read(f.path()) {
                    return Some(bytes);
                }
            }
        }
    }
    None
}

/// Registers `sans-serif` with plotters once; returns whether text can be drawn.
pub fn register() -> bool {
    static DONE: OnceLock<bool> = OnceLock::new();
    *DONE.get_or_init(|| {
        let Some(bytes) = find_font() else {
            tracing::warn!(
                "no TrueType font found under /usr/share/fonts: progress.png is drawn without text"
            );
            return false;
        };
        // plotters keeps a &'static reference; the font lives for the whole process anyway.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes)
            .is_ok()
    })
}
