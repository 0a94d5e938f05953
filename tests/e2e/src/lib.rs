//! Kura's system suite lives in `tests/`; this library is empty so the package can hold them.
