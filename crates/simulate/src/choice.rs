//! [`Choice`]: the named values of a flag or a JSON field, a leaf every part's enums implement.

/// A closed set of named values: the choices of a flag or of a JSON field, each with a one-line
/// description (what `--help` lists).
pub trait Choice: Sized + Copy + PartialEq + 'static {
    /// Every value with its name and description, in the order they are listed.
    const ALL: &'static [(Self, &'static str, &'static str)];

    /// The value's name.
    fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(v, _, _)| *v == self)
            .map_or("", |(_, name, _)| name)
    }

    /// The value named `text` (exactly), if any.
    fn from_name(text: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .find(|(_, name, _)| *name == text)
            .map(|(v, _, _)| *v)
    }
}
