// A class's event stream, as a page of the class hears it: the snapshot on (re)connecting, then the
// teacher's view, the question as it moves (ask, show, again, reveal), the count of votes, who is there, and
// the end. The question goes into the page's state (blind.js decides from it what the views may draw) and
// onto the stage (stage.js). A snapshot is applied whole: after a reconnect it may differ from what the last
// events said.

import { classEvents, classSnapshot } from "./calls.js";
import { showStage } from "./stage.js";

const RETRY_MS = 2000; // a stream the browser gave up on (the server said 429 or 503) is opened again after this

// role: "teacher" or "learner". on: {snapshot, view, question, votes, presence, gain, ended, connection},
// each optional, called with the event's data (question and votes with the question as it now stands; gain
// with what the class's pre-tests and post-tests measured, or null before they are closed).
export function listen(lab, code, role, on) {
  let question = null;
  let events = null;
  let over = false;
  const setQuestion = (next) => {
    question = next;
    // A closed pre-test hides nothing more: the lesson goes on with the views drawn. A closed post-test keeps
    // them blind until its reveal.
    lab.setState({ question: next?.phase === "closed" && next.test === "pre" ? null : next });
    showStage(next, role);
    on.question?.(next);
  };
  const end = (reason) => {
    over = true;
    events?.close();
    setQuestion(null);
    on.ended?.(reason);
  };
  const data = (event) => JSON.parse(event.data);
  const connect = () => {
    events = classEvents(code);
    events.addEventListener("open", () => on.connection?.(true));
    events.addEventListener("error", async () => {
      on.connection?.(false);
      if (events.readyState !== EventSource.CLOSED || over) return; // the browser reconnects by itself
      // It gave up: the class is gone (404), or the server asks to wait (429, 503).
      const gone = await classSnapshot(code).then(() => false, (error) => error.status === 404);
      if (gone) end("the class has ended");
      else setTimeout(() => !over && connect(), RETRY_MS);
    });
    events.addEventListener("snapshot", (event) => {
      const snapshot = data(event);
      on.snapshot?.(snapshot);
      on.presence?.(snapshot);
      if (snapshot.view) on.view?.(snapshot.view);
      setQuestion(snapshot.question);
      on.gain?.(snapshot.gain);
    });
    events.addEventListener("view", (event) => on.view?.(data(event).view));
    events.addEventListener("question", (event) => setQuestion(data(event).question));
    events.addEventListener("votes", (event) => {
      const counted = data(event);
      if (!question || counted.question !== question.id) return;
      question = { ...question, votes: counted.votes };
      showStage(question, role);
      on.votes?.(question);
    });
    events.addEventListener("presence", (event) => on.presence?.(data(event)));
    events.addEventListener("gain", (event) => on.gain?.(data(event).gain));
    events.addEventListener("ended", (event) => end(data(event).reason));
  };
  connect();
  return {
    close() {
      over = true;
      events.close();
    },
  };
}
