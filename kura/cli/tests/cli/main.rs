//! The `kura` command line as a user meets it: one test binary (ripgrep style), each module
//! a concern, every test on a real database file through the real binary.

mod anchoring;
mod bench;
mod branch;
mod cli;
mod concurrency;
mod export;
mod seal;
mod tamper;
