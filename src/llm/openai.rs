//! The OpenAI-compatible provider (async-openai). NOT IMPLEMENTED YET.
