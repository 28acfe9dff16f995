"""Safety and plumbing: signals, disk-full handling, secret masking, Hugging Face Hub facts."""
