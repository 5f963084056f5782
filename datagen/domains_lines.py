"""The fixed lines of a sample: questions answered without a tool (short and long), what
is asked and said about the scene, the lines overlap events are made of, and what the
assistant says around its work. Format fields in braces (``{thing}``, ``{topic}``) are
filled by the planner. Re-exported by ``venus.datagen.domains``.
"""

# --- what is said without a tool -----------------------------------------------------------
PLAIN = (
    ("What's the capital of Australia?", "The capital of Australia is Canberra."),
    ("How many legs does a spider have?", "A spider has eight legs."),
    ("Who wrote Romeo and Juliet?", "William Shakespeare wrote Romeo and Juliet."),
    ("What's the boiling point of water?", "Water boils at 100 degrees Celsius at sea level."),
    ("How many days are in a leap year?", "A leap year has 366 days."),
    ("What's the largest planet?", "Jupiter is the largest planet in the solar system."),
    ("What language do they speak in Brazil?", "In Brazil people speak Portuguese."),
    ("How many minutes are in a day?", "There are 1440 minutes in a day."),
    ("What's the tallest animal?", "The giraffe is the tallest animal."),
    ("What colour do you get mixing blue and yellow?", "Blue and yellow make green."),
)
LONG = (
    ("Tell me about the moon.", "The moon is about a quarter of the size of the earth. It "
     "takes about a month to go around us, and it always shows us the same face. Its "
     "gravity is what drives most of the tides in the oceans."),
    ("How do bees make honey?", "Bees collect nectar from flowers and carry it back to the "
     "hive. There they pass it from bee to bee and fan it with their wings until most of "
     "the water is gone. Then they seal it in wax cells to keep it for the winter."),
    ("How does a rainbow form?", "A rainbow forms when sunlight shines through "
     "raindrops. Each drop bends the light and splits it into its colours, and reflects it "
     "back towards you. That is why you only see one with the sun behind you."),
    ("What should I know about growing tomatoes?", "Tomatoes need a lot of sun, at least six "
     "hours a day. Water them deeply but not too often, and give them a stake or a cage to "
     "climb. Pick them when they are fully coloured and slightly soft."),
    ("Tell me something about octopuses.", "Octopuses are remarkably clever animals. They "
     "have three hearts and blue blood, and each of their eight arms can taste what it "
     "touches. Some of them can even open jars to get at food."),
)  # fmt: skip
VISUAL = {
    "colour": (("What colour is the {shape}?", "Which colour is the {shape}?"),
               ("It's {colour}.", "The {shape} is {colour}.")),
    "text": (("What does the sign say?", "Can you read the sign for me?"),
             ("It says {text}.", "The sign says {text}.")),
    "count": (("How many {shape}s do you see?", "How many {shape}s are there?"),
              ("I can see {things}.", "There {are} {things}.")),
    "position": (("Where is the {colour} {shape}?", "Where's the {colour} {shape}?"),
                 ("It's {where}.", "The {colour} {shape} is {where}.")),
}  # fmt: skip
SIGNS = ("OPEN", "EXIT", "SALE", "STOP", "CAFE", "PUSH", "QUIET", "TAXI")
WATCH = ("Tell me when a {thing} shows up.", "Let me know if you see a {thing}.")
WATCH_ACK = ("Okay, I'll keep an eye out.", "Sure, I'll tell you when I see one.")
PROACTIVE = ("There it is: a {thing} just appeared {where}.", "I can see a {thing} now, {where}.")

# --- the lines of overlap events ---------------------------------------------------------
BACKCHANNELS = ("mm-hmm", "uh-huh", "yeah", "right", "okay", "I see", "oh, really", "sure")
ASIDES = ("Honey, can you turn the oven off?", "Just a second, Tom, I'm almost done.",
          "Kids, dinner is ready!", "Can you pass me the remote?",
          "Hang on, someone's at the door.",
          "No, the blue one, on the table.")  # fmt: skip
# the user talking on to someone else for 10-15 s while work is pending (delegation.talk_on_p)
LONG_ASIDES = (
    "Honey, can you turn the oven off? And check the potatoes while you're there. If they're "
    "soft, take them out and put the lid on the big pan, I'll do the rest in a minute.",
    "Kids, dinner is nearly ready! Wash your hands, both of you, and somebody set the table. "
    "No, not the good plates, the blue ones from the cupboard by the window.",
    "Hang on, someone's at the door. Tom, can you get it? It's probably the parcel I ordered "
    "last week. If it is, just leave it in the hall, I'll open it later tonight.",
    "No, the blue one, on the table, next to the lamp. Not that one, the other one. Yes, that "
    "one. Thanks. Can you put the rest back in the drawer when you're done with them?",
    "Just a second, Tom, I'm almost done here. Did you remember to call your mother about "
    "Sunday? She wanted to know if we're coming for lunch or only for coffee after.",
    "Can you pass me the remote? And turn the light off on your way out, please. Oh, and "
    "don't forget to take the bins out, they come early tomorrow morning, around seven.",
)  # fmt: skip
OTHER_ASIDES = ("Are you coming to dinner?", "Have you seen my keys anywhere?",
                "I'm going to the shop, do you need anything?")  # fmt: skip
TV_LINES = ("And in tonight's news, the city council has approved the new bridge.",
            "Goal! What a finish from the young striker!",
            "Stay tuned, we'll be right back after these messages.",
            "Temperatures will drop sharply overnight across the north.")  # fmt: skip
ROOM_SPEECH = ("Where did you put the scissors?", "I'll be back in ten minutes.",
               "Did anyone call the plumber?")  # fmt: skip
STOPS = ("Stop.", "Okay, stop, that's enough.", "Wait, stop.", "Stop, please.")
STOPS_CANCEL = ("Stop, forget it.", "Stop, never mind, I don't need it.")
CANCELS = ("Never mind, cancel that.", "Actually, forget it, I don't need it anymore.")
RETRIES = ("Can you try again?", "Try again, please.", "Could you give it another go?")
TOPIC_CHANGE = ("By the way, ", "Oh, before I forget, ", "Wait, different question. ")
REPLACE = ("Actually, forget that. ", "Never mind that. ", "Scratch that. ")

# --- what the assistant says around its work ---------------------------------------------
HOLD = ("Let me check.", "One moment.", "Sure, one second.", "Okay, just a moment.")
HOLD_LONG = ("Sure, I'm {doing} now, it might take a little while.",
             "Okay, {doing}, this should only take a moment or two.")  # fmt: skip
CANCEL_ACK = ("Okay, cancelled.", "Alright, I've cancelled it.", "Okay, never mind then.")
REVISE_ACK = ("Okay, {topic} then, one moment.", "Got it, {topic} instead.")
RETRY_ACK = ("Sure, trying again.", "Okay, let me try once more.")
FAILED = ("Sorry, I couldn't get {topic} just now, the service isn't answering and I am "
          "not sure when it will be back.",)  # fmt: skip
SELF_RETRY = ("That didn't work, let me try again.", "No answer yet, I'll try once more.")
