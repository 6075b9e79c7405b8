"""The search lesson's shipped corpus, written for the lab: sentences on several topics assembled from
templates (a subject, what it did, and where or when), drawn without repeats by a seeded generator. Several
topics share an ambiguous word (a bank of money and a river's bank; a bat that flies and one that hits; a
mouse, a python, a crane, a pitch, a spring, a cell, a seal, a bass), so that a query has to be read as a
whole to find its documents. Every line is the project's own text: no licence to keep.

    python -m app.engine.corpus > app/engine/data/search-corpus.txt

writes the file the lab ships; tests/test_search.py checks that it is what this module makes."""

import random
import sys
from itertools import product

SEED = 47
PER_TOPIC = 220  # 14 topics: 3,080 documents

# topic: (subjects, what they did, where or when). Every combination is a sentence.
TOPICS = {
    "money bank": (
        ["The bank", "My local bank", "The central bank", "A small savings bank", "The bank on the corner", "Our bank"],
        [
            "raised the interest rate on savings accounts",
            "approved the loan for the new bakery",
            "charged a fee for the late payment",
            "opened a branch near the station",
            "froze the account after a suspicious transfer",
            "offered a cheaper mortgage to first buyers",
            "sent every customer a new debit card",
            "cut its lending to small businesses",
            "moved its cash machines inside the lobby",
            "refused the cheque without a signature",
        ],
        ["", " last week", " this morning", " after the audit", " without any warning", " in the spring"],
    ),
    "river bank": (
        ["We", "The fishermen", "A heron", "The children", "My grandfather", "Two otters"],
        [
            "sat on the grassy bank of the river",
            "walked along the muddy river bank",
            "waited on the far bank of the stream",
            "climbed down the steep bank to the water",
            "rested where the bank was shaded by willows",
            "watched the current wear away the bank",
            "found reeds growing thick along the bank",
            "crossed to the other bank on stepping stones",
            "slipped on the wet bank beside the weir",
            "followed the canal bank to the old lock",
        ],
        ["", " at dawn", " after the flood", " all afternoon", " in the summer", " before it rained"],
    ),
    "bat the animal": (
        ["A small brown bat", "The fruit bat", "A colony of bats", "The young bat", "A sleepy bat", "One bat"],
        [
            "hunted moths above the pond",
            "hung upside down in the cave",
            "flew out of the barn at dusk",
            "found its way by echolocation",
            "roosted under the bridge",
            "woke from hibernation",
            "ate ripe figs in the orchard",
            "squeaked too high for us to hear",
            "circled the street lamp",
            "slept in the hollow oak",
        ],
        ["", " every night", " in the spring", " near the farm", " last summer", " after sunset"],
    ),
    "cricket and baseball": (
        ["The batter", "Our captain", "The young player", "The pitcher", "The coach", "The umpire"],
        [
            "swung the bat and missed the ball",
            "picked up a heavier bat for the last innings",
            "hit the ball over the fence",
            "threw a fast pitch to the batter",
            "walked out to the pitch with the bat",
            "checked the pitch before the match",
            "won the match with the last ball",
            "signalled a foul after the swing",
            "practised batting in the nets",
            "cracked the wooden bat on a fast ball",
        ],
        ["", " in the final", " on Saturday", " at the stadium", " in the second game", " before the crowd"],
    ),
    "computers": (
        ["The programmer", "My laptop", "The new intern", "The server", "Our team", "The script"],
        [
            "wrote the parser in Python",
            "crashed when the mouse was unplugged",
            "clicked the mouse to open the file",
            "ran the tests on every commit",
            "stored the results in a spreadsheet cell",
            "installed Java to run the old tool",
            "restarted after the update",
            "copied the data to the cloud",
            "fixed the bug in the login page",
            "ran out of memory on the large model",
        ],
        ["", " this morning", " before the release", " at midnight", " on Monday", " again"],
    ),
    "animals in the wild": (
        ["A python", "The field mouse", "The jaguar", "A grey seal", "The crane", "A wild rabbit"],
        [
            "slid silently through the tall grass",
            "hid in the roots of the old tree",
            "stalked its prey near the river",
            "rested on the rocks by the sea",
            "waded through the marsh on long legs",
            "dug a burrow under the hedge",
            "caught a fish in the shallow water",
            "swallowed a small bird whole",
            "raised its young in the reeds",
            "escaped from the hungry fox",
        ],
        ["", " at dawn", " in the jungle", " last winter", " during the storm", " near the coast"],
    ),
    "building site": (
        ["The crane", "The builders", "A tower crane", "The site manager", "The crane operator", "The engineers"],
        [
            "lifted the steel beams onto the roof",
            "poured concrete for the foundations",
            "swung the load to the north corner",
            "checked the scaffolding for loose bolts",
            "lowered the glass panels into place",
            "stopped work because of high wind",
            "delivered bricks to the third floor",
            "measured the walls for the windows",
            "cleared the rubble from the old factory",
            "raised the last girder of the bridge",
        ],
        ["", " before lunch", " on the new tower", " this week", " in the rain", " near the harbour"],
    ),
    "music": (
        ["The bass player", "The choir", "Our singer", "The orchestra", "The drummer", "A young violinist"],
        [
            "tuned the strings to the right pitch",
            "played a slow line on the bass guitar",
            "sang the chorus a little flat",
            "rehearsed the symphony for the concert",
            "kept time with a steady beat",
            "recorded a new album in the studio",
            "performed the song in a lower key",
            "practised scales for an hour",
            "changed the tempo in the last verse",
            "bowed to the audience after the encore",
        ],
        ["", " at the festival", " last night", " in the church", " before the tour", " on the radio"],
    ),
    "fishing": (
        ["The angler", "My uncle", "A fisherman", "The guide", "The boy", "Two friends"],
        [
            "caught a large bass in the lake",
            "cast the line from the river bank",
            "baited the hook with a worm",
            "released the trout back into the water",
            "waited hours for a bite",
            "rowed the boat to the deep pool",
            "tied a new fly to the line",
            "netted a striped bass near the pier",
            "lost the fish when the line snapped",
            "cleaned the catch for dinner",
        ],
        ["", " at sunrise", " on the lake", " every weekend", " in the cold", " near the dam"],
    ),
    "cooking": (
        ["The chef", "My mother", "The baker", "Our neighbour", "The cook", "A student"],
        [
            "roasted the vegetables with olive oil",
            "baked fresh bread for the market",
            "stirred the soup until it thickened",
            "sliced the apples for a pie",
            "seasoned the fish with lemon and salt",
            "simmered the sauce for two hours",
            "whisked the eggs with sugar",
            "served the rice with spicy beans",
            "brewed a strong pot of coffee",
            "kneaded the dough on the wooden table",
        ],
        ["", " for the guests", " on Sunday", " in the small kitchen", " for the party", " before dinner"],
    ),
    "seasons and weather": (
        ["The spring", "The storm", "A cold front", "The heat wave", "The first frost", "The monsoon"],
        [
            "brought heavy rain to the valley",
            "arrived earlier than expected",
            "flooded the low fields",
            "melted the snow on the mountains",
            "covered the gardens in white",
            "knocked down trees along the road",
            "made the rivers rise",
            "filled the reservoirs again",
            "dried out the farmland",
            "closed the schools for a day",
        ],
        ["", " this year", " in the north", " overnight", " last April", " across the region"],
    ),
    "water and springs": (
        ["The hikers", "The village", "The shepherd", "Our guide", "The monks", "The walkers"],
        [
            "drank from a cold mountain spring",
            "found a hot spring in the valley",
            "filled their bottles at the spring",
            "built a well over the spring",
            "followed the stream back to its spring",
            "bathed in the warm spring water",
            "mapped the springs of the hills",
            "protected the spring from the cattle",
            "carried water up from the spring",
            "named the spring after a saint",
        ],
        ["", " at noon", " in the summer", " long ago", " after the long climb", " every morning"],
    ),
    "biology and health": (
        ["The doctor", "The nurse", "A biologist", "The researcher", "The patient", "The lab"],
        [
            "looked at the cell under the microscope",
            "measured the blood pressure",
            "found a virus in the sample",
            "studied how the cell divides",
            "prescribed rest and plenty of water",
            "tested a new vaccine",
            "counted the white blood cells",
            "took an X-ray of the broken arm",
            "explained how the heart pumps blood",
            "grew the cells in a dish",
        ],
        ["", " at the hospital", " this week", " in the clinic", " after the test", " for the study"],
    ),
    "travel": (
        ["The tourists", "My sister", "The pilot", "Our family", "The backpackers", "The driver"],
        [
            "booked a train to the coast",
            "missed the last bus home",
            "landed the plane in thick fog",
            "rented a car at the airport",
            "stayed in a hostel near the old town",
            "lost the passport at the border",
            "took the ferry across the bay",
            "visited the castle on the hill",
            "changed money at the airport",
            "waited for the delayed flight",
        ],
        ["", " in August", " last year", " on holiday", " before dawn", " with the children"],
    ),
}


def documents() -> list[str]:
    """The corpus, topic by topic: PER_TOPIC sentences of each, drawn without repeats."""
    drawn = random.Random(SEED)
    lines = []
    for subjects, actions, tails in TOPICS.values():
        every = [f"{subject} {action}{tail}." for subject, action, tail in product(subjects, actions, tails)]
        lines += drawn.sample(every, PER_TOPIC)
    return lines


if __name__ == "__main__":
    sys.stdout.write("".join(line + "\n" for line in documents()))
