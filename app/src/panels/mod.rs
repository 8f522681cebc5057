//! One component per panel.

pub mod anatomy;
pub mod chart;
pub mod controls;
pub mod data;
mod draw;
pub mod gpt;
mod gpt_attention;
mod gpt_lessons;
pub mod header;
mod hyper;
mod images;
mod inside;
mod layer_table;
mod layers;
mod lessons;
pub mod network;
pub mod opened;
pub mod output;
mod profile;
mod race;
mod ranks;
pub mod runs;
mod share;
mod steps;
pub mod theme;
