"""What the class mode refuses, and why: each error's sentence is what the page shows, its HTTP status is in
app.main."""


class ClassNotFound(LookupError):
    def __str__(self) -> str:
        return f"there is no class {self.args[0]} (or it has ended): ask the teacher for the code"


class NotTheTeacher(PermissionError):
    def __str__(self) -> str:
        return "only the teacher of this class can do that"


class NotYourLearner(PermissionError):
    def __str__(self) -> str:
        return "this learner joined the class from another browser"


class UnknownLearner(LookupError):
    def __str__(self) -> str:
        return "this learner is not in the class (it may have ended or restarted): join again"


class ClassLimit(RuntimeError):
    """A bound of the class mode was reached (classes, learners, actions per second): 429."""


class ViewTooLarge(ValueError):
    """413."""


class WrongPhase(RuntimeError):
    """The question is not in a phase that allows this (a vote for a closed round, a second round twice): 409."""


class BadChoice(ValueError):
    """A vote for no choice of the question: 422."""


class ClassModeOff(RuntimeError):
    """This lab cannot hold classes as it runs (several processes, no shared store): 503."""
