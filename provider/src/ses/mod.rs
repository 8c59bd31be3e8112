//! ses (being written)
