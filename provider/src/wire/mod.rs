//! wire (being written)
