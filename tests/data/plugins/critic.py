"""self_critic: a reward that asks the acting model whether its own prediction is right (a plugin
whose reward makes a model call: the call is declared, its answer recorded as ``critic``)."""

from icrl.plugin import ModelCall, Reward, register_reward

CRITIQUE = ModelCall("critique", field="critic", summary="critic calls")
ANSWERS = ("right", "wrong")


@register_reward
class SelfCritic(Reward):
    name = "self_critic"
    summary = "the acting model says whether its prediction is right (an example plugin)"
    calls = (CRITIQUE,)
    scores_tests = False

    def __init__(self, flip=False, flip_prob=None, **params):
        super().__init__(flip, flip_prob, **params)
        self.model, self.task, self.last = None, None, None

    def attach(self, call, model):
        self.model = model
        return self

    def bind(self, task):
        self.task = task
        return self

    def reward_of(self, prediction, answer, prompt, seed):
        messages = [{"role": "user", "content": f"{prompt}\nProposed label: {prediction}\nRight or wrong?"}]
        (self.last,) = self.model.predict([self.model.render(messages, "Answer:")], list(ANSWERS), 0.0, seed)
        return int(self.last == "right")

    def fields(self):
        return {CRITIQUE.field: self.last}
