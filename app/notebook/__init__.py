"""The lab in a notebook (attention_lab.show): one anywidget drawing the page's own views (app.notebook.widget),
its requests answered by the lab's API in the kernel or by a running lab (app.notebook.labs)."""

from app.notebook.widget import LabWidget, show

__all__ = ["LabWidget", "show"]
