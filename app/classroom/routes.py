"""The class mode's HTTP API: start and end a class, move it (the teacher, with the class's secret), ask
it questions in rounds, join and follow it (learners, over Server-Sent Events), vote. The class logic is
in app.classroom.classes and its parts; a question's choices and answer come from the run's numbers
(app.engine.questions), from the measures as the attention endpoint has them (at the model's turns, kept)."""

import io
import socket
from dataclasses import asdict
from typing import Annotated

import numpy as np
import segno
from fastapi import APIRouter, Cookie, Depends, Header, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from app.classroom.answers import answers_csv
from app.classroom.classes import Classes
from app.classroom.errors import ClassModeOff, WrongPhase
from app.classroom.schemas import (
    AttendsAsk,
    ClassSnapshot,
    ClassStart,
    ClassStarted,
    ClassView,
    Code,
    CrossAttendsAsk,
    GrownHeadAsk,
    HeadAsk,
    Join,
    Joined,
    LearnerState,
    LossDropAsk,
    PatchAsk,
    QuestionAsk,
    QuestionState,
    Score,
    SearchAsk,
    TemperatureAsk,
    Vote,
    VoteTaken,
    WrittenAsk,
)
from app.engine import questions
from app.engine.errors import InvalidInput
from app.engine.spec import EncoderDecoderSpec, RunSpec
from app.engine.training.spec import TrainingSpec
from app.serving.lab import RunNotFound
from app.serving.server import is_loopback
from app.serving.training import TrainingNotFound, Trainings
from app.web.deps import ClientDep, ExperimentsDep, LabDep, SearchesDep, WritingsDep
from app.web.encoder_decoder import computed
from app.web.events import RESPONSES as events_responses
from app.web.events import EventStream
from app.web.schemas.common import ValidationErrorResponse
from app.web.writing import knobs_of

# A body the API does not take answers the lab's readable 422 (app.main), as the other routers declare it.
router = APIRouter(
    prefix="/api/classes",
    tags=["class mode"],
    responses={422: {"model": ValidationErrorResponse, "description": "The request is not one the API takes"}},
)
TEACHER_COOKIE = "lab_class_teacher"  # the secret again, for the teacher's own event streams and CSV link


async def get_classes(request: Request) -> Classes:
    classes = request.app.state.classes
    if classes.unavailable:
        raise ClassModeOff(classes.unavailable)
    return classes


ClassesDep = Annotated[Classes, Depends(get_classes)]
Secret = Annotated[str | None, Header(alias="X-Class-Secret")]
TeacherCookie = Annotated[str | None, Cookie(alias=TEACHER_COOKIE)]


def join_url(request: Request, code: str) -> tuple[str, bool]:
    """The link learners open, on the address the teacher's browser used. A teacher on 127.0.0.1 of a lab
    that listens on the network gets this computer's network address instead, which phones can reach."""
    base = request.base_url
    host = base.hostname or ""
    listening = request.app.state.settings.host
    if is_loopback(host) and not is_loopback(listening):
        base = base.replace(hostname=network_address())
    reachable = not is_loopback(base.hostname or "")
    return f"{str(base).rstrip('/')}/?class={code}", reachable


def network_address() -> str:
    """This computer's address on its network: the one a UDP socket would send from (nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"


@router.post("", response_model=ClassStarted, status_code=201)
async def start(
    request: Request, response: Response, classes: ClassesDep, client: ClientDep, body: ClassStart | None = None
):
    """A new class, anonymous or not (no body: not). Its secret also goes back as a cookie that only this
    class's event stream and answers are sent: the teacher's own page opens its stream with it (an EventSource
    sends no header)."""
    anonymous = body is not None and body.anonymous
    code, secret = await classes.start_class(client, anonymous)
    url, reachable = join_url(request, code)
    response.set_cookie(
        TEACHER_COOKIE,
        secret,
        max_age=int(classes.limits.ttl_seconds),
        path=f"/api/classes/{code}",
        httponly=True,
        samesite="strict",
    )
    return {"code": code, "secret": secret, "join_url": url, "reachable": reachable, "anonymous": anonymous}


@router.delete("/{code}", status_code=204)
async def end(code: Code, classes: ClassesDep, secret: Secret = None):
    await classes.check_teacher(code, secret)
    await classes.end(code, "the teacher ended the class")


@router.get("/{code}", response_model=ClassSnapshot)
async def snapshot(code: Code, classes: ClassesDep):
    return await classes.snapshot(code)


@router.get("/{code}/qr.svg", response_class=Response, responses={200: {"content": {"image/svg+xml": {}}}})
async def qr(code: Code, request: Request, classes: ClassesDep):
    """The join link as a QR code, drawn here (segno): nothing is fetched from elsewhere."""
    await classes.snapshot(code)
    svg = io.BytesIO()
    segno.make(join_url(request, code)[0], error="m").save(svg, kind="svg", scale=8, border=2, xmldecl=False)
    return Response(svg.getvalue(), media_type="image/svg+xml")


@router.put("/{code}/view", status_code=204)
async def show(code: Code, body: ClassView, classes: ClassesDep, secret: Secret = None):
    await classes.check_teacher(code, secret)
    await classes.show(code, body.view)


@router.post("/{code}/question", response_model=QuestionState, status_code=201)
async def ask(
    request: Request,
    code: Code,
    body: QuestionAsk,
    classes: ClassesDep,
    lab: LabDep,
    experiments: ExperimentsDep,
    searches: SearchesDep,
    writings: WritingsDep,
    client: ClientDep,
    secret: Secret = None,
):
    """A question about a run, or a writing's step, its choices and answer computed here from their numbers; its
    first round opens. Any question asked before is closed (and kept for the answers' CSV)."""
    await classes.check_teacher(code, secret)
    if isinstance(body, GrownHeadAsk | LossDropAsk):
        return await training_question(code, body, classes, request.app.state.trainings)
    if isinstance(body, WrittenAsk | TemperatureAsk):
        asking = written_question if isinstance(body, WrittenAsk) else temperature_question
        question, words = await asking(writings, body, client)
        return await open_round(classes, code, question, body, written=words)
    if isinstance(body, CrossAttendsAsk):
        return await open_round(classes, code, await cross_question(lab, body, client), body)
    run = await of_kind(
        lab,
        body.run_id,
        lambda: lab.serve_run(body.run_id, client),
        EncoderDecoderSpec,
        f"run {body.run_id} is an encoder-decoder's (a source and a target): ask it `cross_attends`, which source "
        "token a target token reads most",
    )
    engine = await lab.engine_for(run.spec.model, client)
    if isinstance(body, AttendsAsk):
        view = questions.View(
            body.layer, body.head, tuple(body.heads), body.block_mean, body.measure, body.sinks, body.segments
        )
        blocks = await lab.measured(run, view.measure, questions.measured_layer(view), client)
        question = await run_in_threadpool(questions.attends, run, blocks, view, body.token)
    elif isinstance(body, HeadAsk):
        question = await run_in_threadpool(questions.head, run, body.layer, body.pattern)
    elif isinstance(body, PatchAsk):
        question = await patch_question(experiments, run, engine, body, client)
    elif isinstance(body, SearchAsk):
        question = await search_question(searches, run, body, client)
    else:
        question = await run_in_threadpool(questions.next_token, run, engine.pieces, body.token)
    return await open_round(classes, code, question, body)


async def open_round(classes: Classes, code: str, question: questions.Question, body, written=None):
    """The question's first round, with the view and the stage step it was asked from as the learners will see them."""
    view = body.model_dump(exclude={"kind", "step", "text", "test"})
    step = body.step.model_dump() if body.step else None
    return await classes.rounds.ask(code, question, view, step, body.text, body.test, written=written)


async def cross_question(lab, body: CrossAttendsAsk, client) -> questions.Question:
    """Which source token a target token reads most, from the encoder-decoder's run recomputed from its spec (as its
    export is), its cross-attention in the view's measure made on a worker thread holding the bytes it takes."""
    spec = await of_kind(
        lab,
        body.run_id,
        lambda: lab.stored_spec(body.run_id, EncoderDecoderSpec, RunNotFound),
        RunSpec,
        f"run {body.run_id} reads one text: a cross_attends question is asked on an encoder-decoder's run (T5, BART, "
        "Marian: a source and a target); ask `attends` on this one",
    )
    engine = await lab.engine_for(spec.model, client)
    run, _ = await computed(engine, spec, lab, client)
    view = questions.CrossView(body.layer, body.head, tuple(body.heads), body.block_mean, body.measure, body.sinks)
    cells = engine.decoder_layers * engine.heads * len(run.target) * len(run.source)

    def ask() -> questions.Question:
        matrix = run.all_weights("cross") if view.measure == "weights" else engine.all_norms(run, "cross")
        return questions.cross_attends(matrix, run.source, run.target, view, body.token)

    return await lab.works.on_thread(f"a cross-attention question on {spec.run_id}", 3 * 4 * cells, ask, client)


async def of_kind(lab, run_id: str, fetch, other: type, mistaken: str):
    """What fetch() finds; where it finds nothing but the store keeps a run of the other kind (an encoder-decoder's
    or a one-text run) by that id, the refusal says the question was asked of the wrong kind of run."""
    try:
        return await fetch()
    except RunNotFound as missing:
        if type(missing) is RunNotFound and await is_kept(lab, run_id, other):
            raise InvalidInput(mistaken) from None
        raise


async def is_kept(lab, run_id: str, kind: type) -> bool:
    """The store keeps a spec of this kind by this id (a question asked of a run of the other kind says so)."""
    try:
        await lab.stored_spec(run_id, kind, RunNotFound)
    except RunNotFound:
        return False
    return True


async def training_question(code: str, body: GrownHeadAsk | LossDropAsk, classes: Classes, trainings: Trainings):
    """A question about a training (the recipe's by default, started or not), asked before what it asks about has
    happened: which head will become its induction head (its choices the model's heads), or when its loss will
    drop (its choices ranges of its steps); answered at the reveal (training_answer)."""
    train_id = body.train_id or TrainingSpec().train_id
    try:
        status = await trainings.status(train_id)
    except TrainingNotFound:
        if body.train_id is not None:
            raise
        status = None
    phase = status["phase_change"] if status else None
    if isinstance(body, GrownHeadAsk) and phase and phase["formed"] is not None:
        raise WrongPhase(
            f"training {train_id} grew its induction head at step {phase['formed']}: ask before it forms (a new "
            "training, or another seed)"
        )
    if isinstance(body, LossDropAsk) and phase:
        raise WrongPhase(
            f"training {train_id}'s loss dropped already (its phase change at step {phase['step']}): ask before it "
            "drops (a new training, or another seed)"
        )
    shape = status["spec"] if status else asdict(TrainingSpec())
    if isinstance(body, GrownHeadAsk):
        question = questions.grown_head(shape["layers"], shape["heads"])
    else:
        question = questions.loss_drop(shape["steps"])
    view = {"train_id": train_id}
    step = body.step.model_dump() if body.step else None
    return await classes.rounds.ask(code, question, view, step, body.text, answered_later=True)


def training_answer(trainings: Trainings):
    """The settle of a question about a training at its reveal, from the training's status now: a grown_head
    question's by each head's induction score at its latest checkpoint, once that checkpoint has an induction
    head; a loss_drop question's by the range holding the step its measures mark as the phase change, once they
    mark one (else WrongPhase: not yet)."""

    async def settle(record: dict) -> questions.Question:
        train_id = record["view"]["train_id"]
        try:
            status = await trainings.status(train_id)
        except TrainingNotFound:
            raise WrongPhase(f"training {train_id} has not started: start it, and reveal once it has") from None
        where = f"step {status['step']:,} of {status['steps']:,}, {status['state']}"
        spec = status["spec"]
        if record["kind"] == "loss_drop":
            if not status["phase_change"]:
                raise WrongPhase(f"training {train_id}'s loss has not dropped yet ({where}): reveal once it has")
            return questions.loss_drop(spec["steps"], status["phase_change"]["step"])
        if not status["checkpoints"] or not status["checkpoints"][-1]["scores"]["formed"]:
            raise WrongPhase(f"training {train_id} has no induction head yet ({where}): reveal once it has formed")
        return questions.grown_head(spec["layers"], spec["heads"], status["checkpoints"][-1]["scores"]["prefix_min"])

    return settle


async def written_question(writings, body: WrittenAsk, client) -> tuple[questions.Question, str]:
    """Which token comes next at the writing's step, from the step as the writing wrote it (its funnel's last stage,
    its draw), and the words it continues."""
    writing = body.writing
    spec = await writings.spec(writing.model, writing.text, knobs_of(writing), client)
    step, words, _ = await writings.step_at(spec, body.index, client)
    last, draw = step["funnel"][-1], step["draw"]
    candidates = list(zip(last["ids"], last["tokens"], last["probabilities"], strict=True))
    # The token drawn and the probability it was drawn with: the race lists it (first to arrive); greedy's is
    # the likeliest.
    race = dict(zip(draw["ids"], draw["probabilities"], strict=True))
    drawn = (step["token"], step["text"], race.get(step["token"], last["probabilities"][0]))
    question = questions.written_next(candidates, drawn, words, f"{spec.run_id}:{body.index}", draw["how"] == "race")
    return question, words


async def temperature_question(writings, body: TemperatureAsk, client) -> tuple[questions.Question, str]:
    """With which temperature is the step's `rank`th likeliest token likelier? Its probability at each temperature,
    from a token written after the words so far at that temperature (Writings.at_temperature)."""
    writing = body.writing
    spec = await writings.spec(writing.model, writing.text, knobs_of(writing), client)
    step, words, ids = await writings.step_at(spec, body.index, client)
    raw = step["funnel"][0]  # the softmax: the order every temperature keeps
    token, text = raw["ids"][body.rank], raw["tokens"][body.rank]
    chances = {}
    for temperature in body.temperatures:
        stage = await writings.at_temperature(spec, words, ids, temperature, client)
        chances[temperature] = stage["probabilities"][stage["ids"].index(token)]
    return await run_in_threadpool(questions.likelier_at, text, chances, words), words


async def patch_question(experiments, run, engine, body: PatchAsk, client) -> questions.Question:
    """A patch question's sweep, as POST /api/patch computes it, over the run's text as that endpoint reads it:
    alone, with the model's own mask and pooling and no prompt."""
    spec = run.spec
    if spec != engine.spec(spec.text, prompt=""):
        raise InvalidInput("a patch question reads the text alone, with the model's own mask and pooling: run it so")
    if body.by == "head":
        sweep = {"site": "head", "sweep": "blocks_heads", "position": body.token}
    else:
        sweep = {"site": "resid_pre", "sweep": "blocks_positions"}
    answer = await experiments.patch(spec.model, client, text=spec.text, source=body.source, align=body.align, **sweep)
    return await run_in_threadpool(questions.patched, answer, body.layer, body.by, body.source)


async def search_question(searches, run, body: SearchAsk, client) -> questions.Question:
    """Which document comes first for the run's text, read as the run read it (its prompt) with the typed prefix,
    among the chosen documents or the exact ranking's first few; the documents read as the index read them (its
    prompt and typed prefix), and each one's place in the whole index's exact ranking."""
    spec = await searches.spec(body.index_id)
    if spec.model != run.spec.model:
        raise InvalidInput(
            f"the index was made by {spec.model}, the run by {run.spec.model}: the same model reads both"
        )
    scores = await searches.cosines(spec, run.spec.text, run.spec.prompt, body.prefix, client)
    chosen = body.documents or np.argsort(-scores, kind="stable")[: body.count].tolist()
    query = f"{body.prefix}{run.spec.text}"
    return await run_in_threadpool(
        questions.first_document, scores, spec.documents, query, chosen, f"{spec.run_id}:{query}", spec.prefix
    )


@router.post("/{code}/question/show", response_model=QuestionState)
async def show_votes(code: Code, classes: ClassesDep, secret: Secret = None):
    await classes.check_teacher(code, secret)
    return await classes.rounds.show_votes(code)


@router.post("/{code}/question/again", response_model=QuestionState)
async def again(code: Code, classes: ClassesDep, secret: Secret = None):
    await classes.check_teacher(code, secret)
    return await classes.rounds.again(code)


@router.post("/{code}/question/close", response_model=QuestionState)
async def close(code: Code, classes: ClassesDep, secret: Secret = None):
    """A pre-test's or a post-test's round closes, its votes shown to nobody; once a pre-test and a post-test
    are closed, the class's gain goes to every screen ("gain")."""
    await classes.check_teacher(code, secret)
    return await classes.rounds.close_test(code)


@router.post("/{code}/question/reveal", response_model=QuestionState)
async def reveal(request: Request, code: Code, classes: ClassesDep, secret: Secret = None):
    """The answer, its value and each round's tally; a question about a training is answered from its status now:
    a grown_head question's from its latest checkpoint (409 until that checkpoint has an induction head), a
    loss_drop question's from its phase change (409 until its measures mark one)."""
    await classes.check_teacher(code, secret)
    return await classes.rounds.reveal(code, settle=training_answer(request.app.state.trainings))


@router.get("/{code}/answers.csv", response_class=Response, responses={200: {"content": {"text/csv": {}}}})
async def answers(code: Code, classes: ClassesDep, secret: Secret = None, cookie: TeacherCookie = None):
    """Every learner's votes per question, for the teacher: nicknames or "learner N" (always "learner N" in an
    anonymous class), never an address."""
    await classes.check_teacher(code, secret or cookie)
    return Response(
        await answers_csv(classes.store, code),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="class-{code}-answers.csv"'},
    )


@router.post("/{code}/learners", response_model=Joined, status_code=201)
async def join(code: Code, body: Join, classes: ClassesDep, client: ClientDep):
    return await classes.join(code, client, body.nickname)


@router.put("/{code}/learners/{learner}", status_code=204)
async def update(code: Code, learner: str, body: LearnerState, classes: ClassesDep, client: ClientDep):
    await classes.update(code, learner, client, body.following, body.nickname)


@router.put("/{code}/learners/{learner}/vote", response_model=VoteTaken)
async def vote(code: Code, learner: str, body: Vote, classes: ClassesDep, client: ClientDep):
    await classes.vote(code, learner, client, body.question, body.round, body.choice)
    return body.model_dump()


@router.get("/{code}/learners/{learner}/score", response_model=Score)
async def score(code: Code, learner: str, classes: ClassesDep, client: ClientDep):
    return await classes.score(code, learner, client)


@router.get("/{code}/events", response_class=StreamingResponse, responses=events_responses)
async def events(
    code: Code, classes: ClassesDep, client: ClientDep, secret: Secret = None, cookie: TeacherCookie = None
):
    """Server-Sent Events: first the class as it is ("snapshot"), then each change ("view", "question",
    "votes", "presence", "gain"), and last "ended" when the class ends or "closing" when this server stops. A
    stream that ends without either (the store's events were interrupted) is reconnected by the browser,
    which takes a fresh snapshot. The teacher's page is known by the class's secret (header or cookie)."""
    return EventStream(classes.follow(code, client, secret or cookie))
