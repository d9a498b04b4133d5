//! One module per subcommand: argument parsing and wiring only; the work lives in the crates.

pub mod bench;
pub mod blast;
pub mod lab;
pub mod score;
