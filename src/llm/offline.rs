//! The offline provider. NOT IMPLEMENTED YET.
