//! One component per panel.

pub mod anatomy;
pub mod controls;
pub mod data;
mod draw;
pub mod header;
mod hyper;
mod inside;
mod layers;
mod lessons;
pub mod network;
pub mod output;
mod steps;
