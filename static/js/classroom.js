// Live class mode. The teacher's page ("Class") starts a class, sends its view to the class as it changes,
// asks the class questions and plays lesson plans (class/teacher.js); a learner's page, opened from the join
// link (?class=CODE), follows the teacher's view and votes (class/learner.js). What every page of the class
// may draw while a question is open is the server's question phase (blind.js, class/stage.js).

import { initLearner } from "./class/learner.js";
import { initTeacher } from "./class/teacher.js";

export function initClassroom(lab) {
  const code = lab.getState().classCode;
  if (code) initLearner(lab, code);
  else initTeacher(lab);
}
