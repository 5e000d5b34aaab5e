"""OpenAI's fine-tuning API under /v1/ (issue #31): files and fine-tuning jobs in OpenAI's shapes, mapped onto
Starverse datasets and jobs, so that the official `openai` client works with base_url=<site>/v1 and an API
token as its api_key. docs/FINE_TUNING.md, "The OpenAI fine-tuning API", says what is supported."""
