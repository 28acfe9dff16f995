"""same_first_letter: 1 for the right label, 0.5 for a wrong label with its first letter."""

from icrl.plugin import Reward, register_reward


@register_reward
class SameFirstLetter(Reward):
    name = "same_first_letter"
    summary = "1 for the right label, 0.5 for a wrong label of the same first letter, else 0 (an example plugin)"

    def score(self, prediction, answer):
        if prediction == answer:
            return 1
        return 0.5 if prediction[:1] == answer[:1] else 0
