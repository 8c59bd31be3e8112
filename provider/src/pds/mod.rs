//! pds (being written)
