"""The method: what a reader of the paper looks for (episodes, prompts, feedback, rewards,
context strategies, exploration, the agents, embeddings, the environment)."""
