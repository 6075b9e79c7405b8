// The class API (app/classroom/routes.py): one function per call. Teacher actions carry the class's secret.

async function call(method, url, { body, secret, as = "json" } = {}) {
  const headers = { ...(body === undefined ? {} : { "content-type": "application/json" }), ...(secret ? { "X-Class-Secret": secret } : {}) };
  let response;
  try {
    response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch {
    throw new Error("the lab server is not answering");
  }
  if (!response.ok) {
    const detail = await response.json().then((answer) => answer.detail, () => "");
    const said = typeof detail === "string" && detail ? detail : `the class could not do that (error ${response.status})`;
    throw Object.assign(new Error(response.status === 429 ? `${said} (wait a moment)` : said), { status: response.status });
  }
  if (response.status === 204) return null;
  return as === "text" ? response.text() : response.json();
}

const base = (code) => `/api/classes/${code}`;

// The teacher's side: {code, secret} is the class this tab teaches.
// anonymous: the class keeps no nickname, and its CSV numbers learners (chosen once, as it starts).
export const startClass = (anonymous) => call("POST", "/api/classes", { body: { anonymous } });
export const endClass = ({ code, secret }) => call("DELETE", base(code), { secret });
export const showView = ({ code, secret }, view) => call("PUT", `${base(code)}/view`, { body: { view }, secret });
// ask: a QuestionAsk ({kind: "attends" | "head" | "next_token", run_id, ...}); the server builds the choices.
export const askQuestion = ({ code, secret }, ask) => call("POST", `${base(code)}/question`, { body: ask, secret });
// move: "show" (close the round, show its votes), "again" (a second round), "reveal" (the answer).
export const moveQuestion = ({ code, secret }, move) => call("POST", `${base(code)}/question/${move}`, { secret });
export const answersCSV = ({ code, secret }) => call("GET", `${base(code)}/answers.csv`, { secret, as: "text" });

// The learner's side.
export const joinClass = (code, nickname) => call("POST", `${base(code)}/learners`, { body: { nickname } });
export const updateLearner = (code, learner, following, nickname) => call("PUT", `${base(code)}/learners/${learner}`, { body: { following, nickname } });
export const vote = (code, learner, question, round, choice) => call("PUT", `${base(code)}/learners/${learner}/vote`, { body: { question, round, choice } });
export const score = (code, learner) => call("GET", `${base(code)}/learners/${learner}/score`);

export const classSnapshot = (code) => call("GET", base(code));
export const classEvents = (code) => new EventSource(`${base(code)}/events`);
export const qrURL = (code) => `${base(code)}/qr.svg`;
