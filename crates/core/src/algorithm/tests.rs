//! Cross-algorithm tests: properties every algorithm must hold.
