//! Durations in the words of the file, shared by validation errors and descriptions.

/// A duration in microseconds as the largest whole unit (`1s`, `1500ms`, `250us`).
pub(super) fn format_micros(micros: u64) -> String {
    let text = floodgate_core::quota::format_period(micros);
    // format_period writes a lone unit without its count (`s`, `min`).
    if text.starts_with(|c: char| c.is_ascii_digit()) {
        text
    } else {
        format!("1{text}")
    }
}
