"""The simulators' phrase book: the words and lines the sentence builders of
``bapjax.sim.language`` choose from (verbs, referring expressions, relation and anchor words,
shape names, the chat around instructions), and the grounding checker
(``bapjax.sim.grounding``) reads back.

Data only: every entry is a tuple (or a dict of tuples) of phrases, in the order the builders'
random choices index them, so reordering or editing an entry changes the simulated corpora.
Conventions as in ``bapjax.sim.language``: directions are the Builder's ("front" is toward the
Builder, "behind" away from it).
"""

# --------------------------------------------------------------------------------------------
# Numbers, lead-ins and verbs

NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten", "eleven", "twelve")
PREFIXES = ("", "", "", "", "now ", "next, ", "ok ", "okay, ", "then ", "great, now ", "alright, ",
            "good. ", "nice. now ", "perfect. next ", "after that, ", "next up, ", "so ", "and now ",
            "cool. ", "awesome, now ", "ok so ", "good job. now ")
PLACE_VERBS = ("place", "put", "add", "set", "put down", "drop", "stick", "lay", "put in", "plop", "build",
               "use", "attach", "make")


# --------------------------------------------------------------------------------------------
# Referring expressions for a reference block

LAST_PHRASES = ("the last block", "the last one", "the last block you placed", "the block you just placed",
                "the previous block", "that block", "that one", "it", "the one you just put down",
                "the last block you put down", "the last brick", "your last block", "the one you just added",
                "the most recent block", "the block you added last")
EXTREME_WORDS = {
    "top": ("top-most", "topmost", "highest", "top", "uppermost"),
    "bottom": ("bottom-most", "bottommost", "lowest", "bottom"),
    "left": ("left-most", "leftmost"),
    "right": ("right-most", "rightmost"),
    "front": ("front-most", "frontmost"),  # bare "closest" could mean closest to the last block
    "back": ("back-most", "backmost"),
}
EXTREME_POSTFIX = {  # "the red block furthest to the left"
    "top": ("at the top", "highest up"),
    "bottom": ("at the bottom", "lowest down"),
    "left": ("furthest to the left", "farthest to your left", "on the far left"),
    "right": ("furthest to the right", "farthest to your right", "on the far right"),
    "front": ("closest to you", "nearest to you", "nearest you", "in front"),
    "back": ("farthest from you", "furthest away from you", "furthest from you", "at the back"),
}


# --------------------------------------------------------------------------------------------
# Relations to a reference block (1D / 2D / 3D with distances)

ADJACENT_1D = {  # distance one, no number
    "left": ("to the left of", "left of", "on the left side of", "directly to the left of", "just left of",
             "to the left side of"),
    "right": ("to the right of", "right of", "on the right side of", "directly to the right of",
              "just right of", "to the right side of"),
    "up": ("on top of", "above", "directly above", "atop", "on the top of", "over"),
    "down": ("below", "under", "underneath", "beneath", "directly below", "directly under"),
    "front": ("in front of", "directly in front of", "just in front of", "on the near side of"),
    "behind": ("behind", "directly behind", "just behind", "on the far side of", "in back of"),
}
# Counted components: (head with {n} and {b}, connector before the reference when last)
COUNTED = {
    "left": (("{n} to the left", " of"), ("{n} {b} to the left", " of"), ("{n} left", " of"),
             ("{n} {b} left", " of")),
    "right": (("{n} to the right", " of"), ("{n} {b} to the right", " of"), ("{n} right", " of"),
              ("{n} {b} right", " of")),
    "up": (("{n} above", ""), ("{n} {b} above", ""), ("{n} up", " from"), ("{n} {b} higher", " than"),
           ("{n} {b} up", " from")),
    "down": (("{n} below", ""), ("{n} under", ""), ("{n} underneath", ""), ("{n} {b} below", ""),
             ("{n} down", " from"), ("{n} {b} lower", " than")),
    "front": (("{n} in front", " of"), ("{n} {b} in front", " of"), ("{n} {b} closer to you", " than"),
              ("{n} {b} nearer to you", " than")),
    "behind": (("{n} behind", ""), ("{n} {b} behind", ""), ("{n} {b} farther away", " than"),
               ("{n} {b} further from you", " than"), ("{n} {b} back", " from")),
}
DIAGONAL_PARTS = {
    "left": (("to the left", " of"),),
    "right": (("to the right", " of"),),
    "up": (("above", ""), ("on top", " of")),
    "down": (("below", ""), ("under", "")),
    "front": (("in front", " of"),),
    "behind": (("behind", ""),),
}
CORNER_2D = {  # up/down with left/right, as one word pair
    ("up", "left"): ("to the top left of", "to the upper left of", "up and to the left of"),
    ("up", "right"): ("to the top right of", "to the upper right of", "up and to the right of"),
    ("down", "left"): ("to the bottom left of", "to the lower left of", "down and to the left of"),
    ("down", "right"): ("to the bottom right of", "to the lower right of", "down and to the right of"),
}


# --------------------------------------------------------------------------------------------
# Builder-anchored directions ("going up and to the left of you")

ANCHOR_WORDS = {
    "left": ("to the left of you", "to your left", "left", "to the left"),
    "right": ("to the right of you", "to your right", "right", "to the right"),
    "up": ("up", "upwards", "up"),
    "down": ("down", "downwards"),
    "front": ("toward you", "towards you"),
    "behind": ("away from you", "away from you"),
}


# --------------------------------------------------------------------------------------------
# Builder and Architect chit-chat

COLOR_QUESTIONS = ("what color?", "which color?", "what color should it be", "sure, what color?",
                   "which color do you want", "what colour?", "ok, what color?", "what color is it?",
                   "you didn't say the color, which one?", "color?")
COLOR_ANSWERS = ("{c}", "{c}", "{c} please", "make it {c}", "a {c} one", "{c}, sorry", "oh, {c}")
COUNT_QUESTIONS = ("how many?", "how many blocks?", "how many should i place", "how many of them?",
                   "how many do you need?")
COUNT_ANSWERS = ("{n}", "{n} blocks", "{n} of them", "{n}, sorry", "just {n}")
LENGTH_QUESTIONS = ("how long?", "how many blocks long?", "how big should it be", "what size?", "what length?",
                    "how many units long?")
DIRECTION_QUESTIONS = ("which direction?", "in which direction?", "which way?", "going which way?")
DIRECTION_ANSWERS = ("{d}", "{d}", "sorry, {d}", "{d} please")
CONFIRMATIONS = ("done", "done!", "ok", "okay", "finished", "there you go", "ok done", "placed it", "got it",
                 "done, what next?", "alright", "next?", "k", "all done", "done. what's next?", "there",
                 "ok, that's done", "finished that part", "ok, placed", "i think that's it",
                 "what now?", "anything else?", "and now?", "that was easy", "ok, ready for the next one",
                 "whoops, took me a second, done", "done, sorry it took a while", "here you go")

# Talk around the instructions (no grounded content; MDC-like chat). Every line here is true
# whatever the world looks like, or is chosen only where it is (see `bapjax.sim.dialogue`).

ARCHITECT_FEEDBACK = (  # after the Builder's actions, when they are right
    "good", "great", "perfect", "perfect!", "nice", "nice!", "awesome", "excellent", "cool",
    "yes", "yep", "yup", "yeah", "correct", "exactly", "good job", "great job", "nice job",
    "well done", "very good", "looks good", "looks great", "that looks right", "that's right",
    "that's correct", "yes, that's it", "yes exactly", "yeah that's it", "perfect, thanks",
    "great, thank you", "good work so far", "looking good", "nice, keep going", "good, that's it for that part",
    "awesome job", "excellent, thanks", "sweet", "perfect, that's exactly what i wanted", "yes! good",
    "yep, looks good", "good stuff", "alright, good", "ok good", "ok perfect", "that works",
    "right, good", "beautiful", "nicely done", "yes, exactly like that", "great, that's all for this step",
    "you're doing great", "we're making good progress", "that was quick", "wow, fast", "good, you got it",
    "love it", "fantastic", "superb", "brilliant", "that is exactly it", "yes, that's the one",
    "all good", "no complaints here", "so far so good", "right on", "spot on", "very nice work",
    "good, that part is correct", "thanks, that's right", "yay", "great, that's perfect",
    "that's exactly the right spot", "right spot, right color", "those look right", "these look good",
    "they're all in the right place", "matches the picture", "just like the target", "that's what we need",
)
CHECK_QUESTIONS = (  # the Builder asks after acting
    "like this?", "is this right?", "is that right?", "is this correct?", "does this look right?",
    "like that?", "this?", "good?", "is that what you meant?", "correct?", "did i get it right?",
    "how does that look?", "is that ok?", "how's that?", "like so?",
)
CHECK_ANSWERS = (
    "yes", "yep", "yup", "yes perfect", "yep, exactly", "yes, that's right", "yeah, perfect",
    "correct", "exactly", "yes, looks good", "yes that's what i meant", "yes, good job",
    "yeah that's correct", "that's it", "perfect",
)
BUILDER_ACKS = (  # after an instruction, before acting
    "ok", "okay", "ok!", "got it", "gotcha", "sure", "sure thing", "on it", "alright", "k", "will do",
    "no problem", "sounds good", "ok one sec", "ok, give me a second", "sure, hold on", "ok let me try",
    "understood", "roger", "yep", "ok doing it now", "ok i think i see", "easy", "ok, makes sense",
    "ok architect", "sure, i'll stay on this side", "ok, i'm currently standing outside it",
    "alright, let me see", "ok, i'm on it", "will try", "hmm ok", "i see", "cool", "okie", "got you",
    "sure, one moment", "ok i'll do that", "yes sir", "can do", "ok, working on it", "understood, doing it",
    "ok let me walk over there", "ok, let me move a bit so i can see", "no worries", "ah ok", "oh ok",
)
ARCHITECT_TRANSITIONS = (  # before the next instruction
    "ok next", "next step", "now for the next part", "ok, next one", "ok now", "alright, next",
    "this next one is a bit tricky", "now the next part", "ok, almost there", "we're almost done",
    "just a few more blocks", "one sec", "hold on", "let me think", "ok let me see", "give me a second",
    "ok here's the next step", "now it gets a little harder", "ok so", "so now", "next up",
    "easy one next", "hmm ok", "ok, moving on", "great, now the rest",
    "let me figure out how to describe this one", "this one is hard to explain", "wait, let me check",
    "ok, i think i know how to say this", "sorry, give me a moment", "let me look at the picture again",
    "ok, here we go", "now something different", "moving on to the next bit", "ok, new part",
    "sorry for the wait", "alright, the next thing", "this is an easy one", "ok, this might be confusing",
    "bear with me", "now comes the fun part", "ok, still a few more", "right, next piece",
    "this part is quite easy", "this one is pretty simple", "this might sound complicated", "our structure is coming along",
    "it's coming together", "ok, similar to before", "this is kind of like the last one", "sort of the same idea as before",
    "any questions so far?", "alright, here's another one", "also easy", "ok, and now", "we'll do this one step at a time",
    "this one is even easier", "much easier now", "ask me in case anything is unclear", "this one is a bit longer",
    "wait until i finish typing", "leave the others as they are", "keep the existing blocks where they are",
    "don't move the other blocks", "careful with this one", "ok, the next instruction",
)
OPENERS = (  # the Architect's first line, sometimes
    "hi", "hello!", "hey there", "hi, let's start", "hello builder", "hey, ready to build?",
    "good morning", "ok let's go", "hi! are you ready?", "hello, this one is not too hard",
    "hey, we have a nice one today", "hi there, let's get started", "hello! i'll tell you what to build",
)
OPENER_REPLIES = ("hi", "hello", "ready", "ok", "sure", "yes", "yep", "ready when you are", "hey!",
                  "hi, ready", "let's do it", "sounds good")
CLOSINGS = ("great job!", "perfect, that's it", "done, thanks!", "that's the whole structure",
            "nice work, we are done", "that's everything, well done", "we're finished, thank you!",
            "and that's it, thanks for building", "we're done! good job", "that's all, thank you so much",
            "all done, that was fast", "that completes the structure, nice work", "finished! thanks")
CLOSING_REPLIES = ("thanks!", "thank you", "yay", "great", "cool", "no problem", "that was fun", "thanks, you too",
                   "nice", ":)", "awesome, that was easy", "good teamwork", "bye!", "see you", "that looks cool",
                   "thanks for the clear instructions", "haha finally", "woo", "done and done", "thanks architect",
                   "that was much easier than i thought")
BUILDER_AFTER_CHAT = (  # the Builder, after acting, sometimes says more than "done"
    "sorry, that took a while", "haha ok", "lol", "i had to move around to see it", "hard to see from here",
    "let me know if that's wrong", "i think i got it", "not sure that's right, but done", "was that it?",
    "took me a second to find the spot", "i used a temporary block there", "tell me if i need to fix anything",
    "the camera angle is weird", "ok that was easy", "phew", "i'm getting the hang of this",
    "ya i think that's right", "yea done", "oops, placed one wrong but fixed it", "whoops, had to break one",
    "i'm gonna walk around to see it better", "kinda hard to see the blocks from this angle",
    "basically done", "really hope that's correct", "i already did it", "maybe check it from your view",
    "uh ok, done", "um, i think so", "btw i can see the whole thing now", "anyway, done",
    "i guess that works", "let me know what's next", "my hand slipped but it's fine now",
    "i'm standing right next to it now", "ok i moved closer", "sorry, i was confused for a sec",
    "i understand now", "that makes sense now", "haha that was a weird one", "done, that was tricky",
    "could have been faster, sorry", "i would have gotten it faster from the other side", "quite easy, that one",
    "pretty sure that's it", "every block is in now", "i think our structure looks cool", "we make a good team",
)
ARCHITECT_AFTER_CHAT = (  # the Architect, after "sorry, that took a while" and the like
    "no worries", "no problem", "take your time", "that's fine", "no rush", "all good", "it's ok",
    "don't worry about it", "haha yes", "you're fine", "nope, it's correct", "nah you're good",
    "yep, it's right", "it looks correct from here too", "we're doing well", "it's exactly like the picture",
    "thanks, it matches what i see", "i can see it, looks right", "yes, that's how it should be",
    "good, i was worried that was confusing", "sorry if my instructions were vague", "my bad, that was a hard one to explain",
)
FRAME_NOTES = (  # true of every simulated instruction: directions are in the Builder's frame
    "all directions are from your point of view", "i'll give directions relative to where you're facing",
    "left and right mean your left and right", "when i say front i mean closer to you",
    "behind means further away from you", "everything is from your perspective, wherever you're standing",
    "i'll describe things relative to the last block you placed, mostly",
    "i'll use your view for left and right", "directions are based on where you are looking",
)
FRAME_NOTE_REPLIES = ("ok", "got it", "sounds good", "ok, that helps", "perfect", "makes sense", "cool, thanks")
REPEAT_QUESTIONS = ("could you repeat that?", "sorry, say that again?", "what was that?", "can you say it again please?",
                    "wait, what?", "huh?", "come again?", "sorry, i missed that. again?", "one more time?")
REPEAT_PREFIXES = ("", "", "sure: ", "ok, ", "sorry: ", "again: ")
REFERENCE_QUESTIONS = ("which one?", "which block?", "which one do you mean?", "sorry, which block is that?",
                       "which one is that?", "wait, which one?", "the one where?", "what block do you mean?",
                       "from which block?", "which one exactly?")
REFERENCE_ANSWERS = ("{ref}", "{ref}", "i mean {ref}", "{ref}, sorry", "sorry, {ref}", "{ref}, that one")
LOCATION_QUESTIONS = {  # the Builder checks where, and the Architect answers what is true
    "side": ("my left or yours?", "left from my view?", "my left?", "left as i'm looking at it?",
             "your left or mine?", "right from where i am?", "my right?", "from my side?"),
    "view": ("from where i'm standing?", "from my perspective?", "from my point of view?",
             "as i'm facing now?", "from here?", "facing this way?"),
    "ground": ("on the ground?", "anywhere?", "does it matter where?", "on the floor?", "where exactly?"),
}
LOCATION_ANSWERS = {
    "side": ("your left", "yes, your left", "from your view, yes", "yes, as you are facing",
             "your left, as you stand now", "yours"),
    "view": ("yes", "yes, from where you are now", "yes, as you are facing now", "yep, from your view",
             "yes, from your perspective", "yes, the way you're facing"),
    "ground": ("yes, anywhere on the ground", "anywhere is fine", "on the ground, anywhere", "doesn't matter",
               "yes, on the ground", "wherever you like, on the ground"),
}
SHAPE_NAMES = {  # what an Architect calls each elementary shape (bapjax.sim.shapes.SHAPE_TYPES)
    "row": ("a row", "a line", "a straight line", "a row of blocks"),
    "diagonal": ("a diagonal", "a diagonal line", "a staircase", "a diagonal row"),
    "T": ("a T shape", "a t", "a T", "a shape like the letter T"),
    "L": ("an L shape", "an l", "an L", "a shape like the letter L"),
    "U": ("a U shape", "a u", "a U", "a shape like the letter U"),
    "plane": ("a square", "a flat rectangle", "a plane", "a rectangle"),
}
ORDINALS = ("first", "second", "third", "fourth", "fifth")
FLOATING_NOTES = (
    "it will be floating", "it's floating", "this one is floating", "it floats in the air",
    "it's in the air", "you'll need a support block under it first", "use a temporary block to get it up there",
    "it's not touching anything yet", "you will have to remove the support after",
    "it's floating, so put something under it first and then break it",
    "use a temp block under it", "you'll need a placeholder block", "it'll be hanging in the air",
    "it's supposed to float", "once it's attached you can remove the temp block",
)
LEVEL_WORDS = {1: ("on the ground", "on the ground level", "on the bottom level", "at ground level"),
               2: ("on the second level", "one level up", "on level two", "at height two"),
               3: ("on the third level", "two levels up", "on level three"),
               4: ("on the fourth level", "three levels up", "on level four")}


# --------------------------------------------------------------------------------------------
# Instructions

REMOVE_VERBS = ("remove", "take away", "get rid of", "break", "delete", "take out", "destroy", "knock off",
                "punch out", "clear away")
REMOVE_IT = ("remove it", "take it away", "get rid of it", "break it", "take it out", "delete it", "punch it out",
             "knock it off", "we don't want it there")


# --------------------------------------------------------------------------------------------
# What the Architect says about the whole structure before starting (true of the target)

SHAPE_DETAILS = {  # true of every shape of that kind (bapjax.sim.shapes)
    "row": ("it's just a straight line", "a single line of blocks", "all in one line", "nothing sticking out, just a line",
            "one block thick, all in a line"),
    "diagonal": ("it goes like stairs", "like a staircase, each block one step over", "a diagonal, like steps"),
    "T": ("a bar with a stem coming out of its middle", "like the letter T", "a crossbar and a stem",
          "the stem sticks out from the center of the bar"),
    "L": ("two arms that meet at a corner", "like the letter L", "two lines joined at one end, at a right angle"),
    "U": ("a base with an arm at each end", "like the letter U", "two legs joined by a base",
          "an arm on both ends of the base, with a gap between them", "one leg on either side"),
    "plane": ("a flat rectangle, completely filled in", "a solid rectangle, no gaps", "filled, no holes",
              "every spot inside is filled", "fill it in completely, it's not hollow", "no gaps inside"),
}
CORRECTIONS = (  # the Architect, after the Builder placed the last block in the wrong color
    "no, that one should be {c}", "wrong color, it should be {c}", "oops, i meant {c}, not {w}",
    "that's {w}, it needs to be {c}", "actually the last block should be {c}", "not {w}, {c}",
    "the last one should be {c} instead", "no wait, make that one {c}", "almost, but the color is wrong. it's {c}",
    "switch the last block to {c}", "hmm, that should be a {c} block, not {w}", "close, but replace it with a {c} one",
    "sorry if i was unclear, that block is {c}", "that one's the wrong color, it should be {c}",
)
MISTAKE_REPLIES = ("oops, sorry", "my bad", "whoops, fixing it", "sorry, i misread", "ah, right", "oh, sorry",
                   "oops", "my mistake", "ah ok, will fix", "sorry about that")
SHAPE_PLURALS = {"row": "rows", "diagonal": "diagonals", "T": "Ts", "L": "Ls", "U": "Us", "plane": "rectangles"}
CONNECTION_NOTES = ("it connects to what we built", "it's attached to what's already there",
                    "it touches what we have so far", "it's connected to the rest", "it sticks out from what's there",
                    "it will be touching the other blocks")
SUPPORT_REMARKS = ("i used a temp block and removed it", "had to add a placeholder first and then take it out",
                   "i put a support under it and removed it after", "needed a temporary block for that one",
                   "the support block is removed now", "i added a block to stand it on, then broke it")
